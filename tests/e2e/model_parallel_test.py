"""One model split across processes by mpirun, end to end: usage `model_parallel_test.py INFERD
tp|pp|dp RANKS` (`-tp RANKS`: tensor parallelism; `-pp RANKS`: pipeline parallelism; `-dp RANKS`:
data parallelism, each rank its own sequences).

SmolLM2-135M (INFERD_MODEL: 9 heads, 3 kv heads, a feed-forward of 1536, 30 layers; Q4_1, whose
blocks of 32 the column split keeps whole) in RANKS ranks of one thread each, MPI over loopback:
  - `inferd run`: the greedy text equals one process's, for two prompts (tensor parallelism's
    split sums may part them at a near-tie elsewhere: tests/model/tensor_parallel_test.cpp
    bounds it; a pipeline computes the same bits);
  - `inferd serve`: 8 greedy completions sent at once equal the same 8 sent one at a time (a
    sequence's tokens do not depend on its batch: the all-reduce adds in rank order, a
    micro-batch's rows are the rows the whole batch has; a pipeline runs them as steps in
    flight, /metrics counting steps that overlapped), none fails, and /metrics counts the
    bytes rank 0 sent;
  - SIGKILL to the last rank while requests run: the clients get errors and the whole job is
    gone within 30 seconds (MPI ends it), no hang;
  - (tp) the wrong process count is a clear error;
  - (dp) the same for make-golden's random-weight Qwen3-MoE (if made) with --expert-parallel: its
    experts spread over the ranks, each token sent to its experts' ranks and back; the greedy
    text equals one process's there too (data parallelism computes the same bits).
Exits 77 (skip) without mpirun or a model.
"""
import concurrent.futures
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import server_harness  # noqa: E402

# mpirun as root (CI's containers), and no leak report at exit from a sanitized build: what
# OpenMPI allocates in MPI_Init and keeps is its own (the rest of the sanitizers stay on).
ENV = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
       "OMPI_MCA_btl_vader_single_copy_mechanism": "none",
       "ASAN_OPTIONS": (os.environ.get("ASAN_OPTIONS", "") + ":detect_leaks=0").lstrip(":")}
PROMPTS = ["The capital of France is", "List three colors:"]


def mpirun(ranks):
    return ["mpirun", "-n", str(ranks), "--oversubscribe", "--bind-to", "none"]


def run_text(cmd):
    done = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def complete(base, prompt, max_tokens=24):
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": max_tokens > 24}
    req = urllib.request.Request(base + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())["choices"][0]["text"]


def main():
    inferd, split, ranks = sys.argv[1], sys.argv[2], int(sys.argv[3])
    assert split in ("tp", "pp", "dp"), split
    flag = f"-{split}"
    model = os.environ.get("INFERD_MODEL", "")
    if not shutil.which("mpirun") or not os.path.isfile(model):
        print("SKIP: no mpirun or no model (INFERD_MODEL)")
        return 77
    tmp = tempfile.mkdtemp()
    # `inferd serve` under mpirun, as server_harness starts a server binary.
    wrapper = os.path.join(tmp, "inferd-mpi")
    with open(wrapper, "w") as f:
        f.write("#!/bin/sh\nexec " + " ".join(mpirun(ranks)) + f" {inferd} \"$@\" {flag} {ranks} -t 1\n")
    os.chmod(wrapper, os.stat(wrapper).st_mode | stat.S_IEXEC)

    for prompt in PROMPTS:
        one = run_text([inferd, "run", "-m", model, "-p", prompt, "-n", "32", "--temp", "0", "-t", "1"])
        text = run_text(mpirun(ranks) + [inferd, "run", "-m", model, "-p", prompt, "-n", "32", "--temp", "0",
                                          "-t", "1", flag, str(ranks)])
        assert one == text, (prompt, one, text)
    print(f"run: {len(PROMPTS)} prompts, the same greedy text with {ranks} ranks")
    moe = os.path.join(os.environ.get("INFERD_CACHE", os.path.expanduser("~/.cache/inferd")),
                       "golden-models", "qwen3moe-seed7.F16.gguf")
    if split == "dp" and os.path.isfile(moe):
        for prompt in PROMPTS:
            args = ["run", "-m", moe, "-p", prompt, "-n", "32", "--temp", "0", "-t", "1"]
            one = run_text([inferd] + args)
            text = run_text(mpirun(ranks) + [inferd] + args + [flag, str(ranks), "--expert-parallel"])
            assert one == text, (prompt, one, text)
        print(f"run: qwen3moe, {len(PROMPTS)} prompts, the same greedy text with its experts over {ranks} ranks")

    prompts = [f"Question {i}: what is {i} plus {i}? Answer:" for i in range(8)]
    os.environ.update({k: ENV[k] for k in ("OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM",
                                           "OMPI_MCA_btl_vader_single_copy_mechanism", "ASAN_OPTIONS")})
    server = server_harness.Server(wrapper, model, "-np", "8")
    try:
        expected = [complete(server.base, p) for p in prompts]
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            got = list(pool.map(lambda p: complete(server.base, p), prompts))
        assert got == expected, (got, expected)
        if split == "dp":  # the same bits as one process, whichever rank ran a sequence
            alone = [run_text([inferd, "run", "-m", model, "-p", p, "-n", "24", "--temp", "0", "-t", "1"])
                     for p in prompts[:3]]
            assert [a.rstrip("\n") for a in alone] == [g for g in got[:3]], (alone, got[:3])
        values, _ = server.metrics()
        sent = values.get("inferd:model_parallel_bytes_sent_total", 0)
        assert sent > 0, "no model-parallel bytes in /metrics"
        overlapped = values.get("inferd:pipeline_overlapped_steps_total", 0)
        if split == "pp":  # 8 sequences: steps of 4 in flight, one after the other
            assert overlapped > 0, "no step of the concurrent requests overlapped another"
        print(f"serve: 8 concurrent greedy completions the same as one at a time; rank 0 sent {sent:.0f} bytes; "
              f"{overlapped:.0f} steps launched while another was in flight")

        # Rank 2 dies while requests run: errors, then the job is gone.
        pids = [int(p) for p in subprocess.run(["pgrep", "-f", f"{inferd} serve"], capture_output=True,
                                                text=True).stdout.split()]
        victim = None
        for pid in pids:
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
            except OSError:
                continue
            if env.get(b"OMPI_COMM_WORLD_RANK") == str(ranks - 1).encode():
                victim = pid
        assert victim, "no rank to stop"
        started = time.time()
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            # Long enough to be running when the rank dies (at a few hundred tokens a second).
            futures = [pool.submit(complete, server.base, p, 2000) for p in prompts[:4]]
            time.sleep(0.5)
            os.kill(victim, signal.SIGKILL)
            failed = 0
            for fut in futures:
                try:
                    fut.result(timeout=60)
                except Exception:  # noqa: BLE001  (a reset connection, a refused one, an HTTP error)
                    failed += 1
        server.proc.wait(timeout=30)
        assert failed == 4, f"{4 - failed} of 4 requests in flight did not fail"
        print(f"rank {ranks - 1} killed: the job ended after {time.time() - started:.1f} s, "
              f"{failed} of 4 requests in flight got errors")
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
            server.proc.wait(timeout=30)

    if split == "dp" and os.path.isfile(moe):  # many sequences a step, on both ranks, through the experts
        server = server_harness.Server(wrapper, moe, "-np", "8", "--expert-parallel")
        try:
            alone = [run_text([inferd, "run", "-m", moe, "-p", p, "-n", "24", "--temp", "0", "-t", "1"])
                     for p in prompts]
            with concurrent.futures.ThreadPoolExecutor(8) as pool:
                got = list(pool.map(lambda p: complete(server.base, p), prompts))
            assert [a.rstrip("\n") for a in alone] == got, (alone, got)
            print("serve: qwen3moe with its experts over the ranks, 8 concurrent greedy completions the same "
                  "as one process's")
        finally:
            server.proc.kill()
            server.proc.wait(timeout=30)
    if split != "tp":
        shutil.rmtree(tmp, ignore_errors=True)
        return 0
    done = subprocess.run(mpirun(2) + [inferd, "run", "-m", model, "-p", "hi", "-n", "2"], capture_output=True,
                          text=True, env=ENV, timeout=120)
    assert done.returncode != 0 and "--tensor-parallel 1 in a job of 2 process(es)" in done.stderr, done.stderr
    print("a job of 2 processes without --tensor-parallel: a clear error")
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
