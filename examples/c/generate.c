/* A C program on inferd's C ABI (inferd/inferd.h): generates from a prompt, or a chat message,
 * with the sampling settings `inferd run` takes, and prints the text. Built as C by CMake
 * (examples/CMakeLists.txt) and by tests/api against the installed library (pkg-config).
 *
 *   inferd-c-generate MODEL PROMPT [--chat] [--temp T] [--seed S] [-n MAX_TOKENS] [--top-k K]
 *                     [--top-p P] [--min-p P] [--choices N] [--stop STR]... [--json-schema S]
 *                     [--stream]
 *
 * One choice prints its text and a newline, as `inferd run --no-stats` does; with --choices N
 * each choice is printed as "[choice i] TEXT". --stream prints text as it is made (choice 0). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <inferd/inferd.h>

#define MAX_STOPS 16

static int print_delta(void* user_data, size_t prompt_index, int32_t choice, const char* text,
                       size_t text_len, int32_t finished) {
  (void)prompt_index;
  (void)finished;
  size_t* streamed = (size_t*)user_data;
  if (choice == 0) { /* the other choices are printed from the result */
    fwrite(text, 1, text_len, stdout);
    fflush(stdout);
    *streamed += text_len;
  }
  return 0; /* nonzero would cancel the call */
}

static int usage(const char* program) {
  fprintf(stderr,
          "usage: %s MODEL PROMPT [--chat] [--temp T] [--seed S] [-n MAX_TOKENS] [--top-k K] "
          "[--top-p P] [--min-p P] [--choices N] [--stop STR]... [--json-schema S] [--stream]\n",
          program);
  return 2;
}

int main(int argc, char** argv) {
  if (argc < 3) return usage(argv[0]);
  const char* model = argv[1];
  const char* prompt = argv[2];
  int chat = 0, stream = 0;
  const char* stops[MAX_STOPS];
  size_t n_stops = 0;

  inferd_sampling_params params;
  inferd_sampling_params_init(&params);
  for (int i = 3; i < argc; ++i) {
    const char* arg = argv[i];
    const char* value = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(arg, "--chat") == 0) {
      chat = 1;
    } else if (strcmp(arg, "--stream") == 0) {
      stream = 1;
    } else if (value == NULL) {
      return usage(argv[0]);
    } else {
      ++i;
      if (strcmp(arg, "--temp") == 0) {
        params.temperature = strtof(value, NULL);
      } else if (strcmp(arg, "--seed") == 0) {
        params.seed = strtoll(value, NULL, 10);
      } else if (strcmp(arg, "-n") == 0) {
        params.max_tokens = strtoll(value, NULL, 10);
      } else if (strcmp(arg, "--top-k") == 0) {
        params.top_k = (int32_t)strtol(value, NULL, 10);
      } else if (strcmp(arg, "--top-p") == 0) {
        params.top_p = strtof(value, NULL);
      } else if (strcmp(arg, "--min-p") == 0) {
        params.min_p = strtof(value, NULL);
      } else if (strcmp(arg, "--choices") == 0) {
        params.n = (int32_t)strtol(value, NULL, 10);
      } else if (strcmp(arg, "--stop") == 0 && n_stops < MAX_STOPS) {
        stops[n_stops++] = value;
      } else if (strcmp(arg, "--json-schema") == 0) {
        params.json_schema = value;
      } else {
        return usage(argv[0]);
      }
    }
  }
  params.stop = stops;
  params.n_stop = n_stops;

  char* error = NULL;
  inferd_engine* engine = NULL;
  inferd_engine_options options;
  inferd_engine_options_init(&options);
  /* Like `inferd run`: one prompt's choices are the only sequences, so this is all it needs. */
  options.max_seqs = params.n > 1 ? params.n : 1;
  inferd_status status = inferd_engine_open(model, &options, &engine, &error);
  if (status != INFERD_OK) {
    fprintf(stderr, "error (%s): %s\n", inferd_status_name(status), error ? error : "");
    inferd_string_free(error);
    return 1;
  }

  size_t streamed = 0;
  inferd_result* result = NULL;
  inferd_stream_fn on_delta = stream ? print_delta : NULL;
  if (chat) {
    inferd_chat_message message = {"user", prompt};
    status = inferd_chat(engine, &message, 1, &params, on_delta, &streamed, &result, &error);
  } else {
    status = inferd_generate(engine, &prompt, 1, &params, on_delta, &streamed, &result, &error);
  }
  if (status != INFERD_OK) {
    fprintf(stderr, "error (%s): %s\n", inferd_status_name(status), error ? error : "");
    inferd_string_free(error);
    inferd_result_free(result);
    inferd_engine_close(engine);
    return 1;
  }

  const size_t choices = inferd_result_num_choices(result, 0);
  int failed = 0;
  for (size_t c = 0; c < choices; ++c) {
    size_t len = 0;
    const char* text = inferd_result_text(result, 0, c, &len);
    if (inferd_result_finish_reason(result, 0, c) == INFERD_FINISH_ERROR) failed = 1;
    if (stream && c == 0) {
      /* Streamed already: the deltas must add up to the result's text. */
      if (streamed != len) {
        fprintf(stderr, "streamed %zu bytes but the result has %zu\n", streamed, len);
        failed = 1;
      }
      if (choices == 1) {
        fputc('\n', stdout);
        continue;
      }
      fputc('\n', stdout);
    }
    if (choices > 1) printf("[choice %zu] ", c);
    fwrite(text, 1, len, stdout);
    fputc('\n', stdout);
  }
  size_t n_tokens = 0;
  inferd_result_tokens(result, 0, 0, &n_tokens);
  fprintf(stderr, "[inferd-c] prompt %zu tokens, generated %zu tokens, finish: %d\n",
          inferd_result_prompt_tokens(result, 0), n_tokens,
          (int)inferd_result_finish_reason(result, 0, 0));
  inferd_result_free(result);
  inferd_engine_close(engine);
  return failed;
}
