// Interpreter: renders a parsed template with a set of global variables. Output size, value
// size, call depth and total work are capped, so a hostile template ends in an inferd::Error.
#pragma once

#include <string>

#include "tokenizer/jinja/ast.h"

namespace inferd::jinja {

struct RenderLimits {
  size_t max_output_bytes = 1 << 22;  // also the largest string or list built on the way
  int max_call_depth = 64;            // nested macro calls
  int64_t max_steps = 2'000'000;      // statements and expressions evaluated, plus copying work
};

// `globals` shadow Jinja's own (range, dict, namespace).
std::string render(const StmtList& program, const Dict& globals, const RenderLimits& limits = {});

}  // namespace inferd::jinja
