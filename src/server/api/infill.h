// llama-server's POST /infill: fill-in-the-middle for code editors. The request's code before
// and after the cursor (and, optionally, other files of the project) become one prompt of the
// model's FIM tokens; the rest is a native /completion request.
#pragma once

#include <nlohmann/json.hpp>

#include "server/api/openai_request.h"

namespace inferd::server {

// The native /completion body for an /infill request: its fields with "prompt" replaced by the
// token ids of the FIM prompt. Fields: input_prefix and input_suffix (text, required), prompt
// (text typed after the prefix, optional), input_extra ([{"filename", "text"}], optional: files
// given as context, in the repository-level form when the model has FIM_REP/FIM_SEP tokens).
// The layout, for a model with all FIM tokens:
//   [REP]myproject\n [SEP]name\n text ... [SEP]filename\n [PRE]prefix prompt [SUF]suffix [MID]
// When the prompt does not fit in 3/4 of the context (the rest is for the answer), the extra
// files go first (the oldest text first), then the suffix's end and the prefix's start, the
// suffix keeping at least a quarter of the room.
// An ApiError (400) for a bad field; 501 when the model has no FIM tokens.
nlohmann::ordered_json infill_to_native(const nlohmann::ordered_json& body,
                                        const ParseContext& ctx);

}  // namespace inferd::server
