// Interpreter: renders a parsed template with a set of global variables. Output size and
// call depth are capped, so a hostile template ends in an inferd::Error, never a hang.
#pragma once

#include <string>

#include "tokenizer/jinja/ast.h"

namespace inferd::jinja {

struct RenderLimits {
  size_t max_output_bytes = 1 << 22;
  int max_call_depth = 64;
  int64_t max_loop_iterations = 1 << 20;
};

std::string render(const StmtList& program, const Dict& globals, const RenderLimits& limits = {});

}  // namespace inferd::jinja
