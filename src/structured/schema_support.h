// Which JSON Schemas constrained decoding enforces exactly. The grammar engine skips some
// keywords (with a log line) and, when a schema object holds several of $ref, const, enum,
// anyOf, oneOf and allOf, reads only the first; generating from such a schema could produce
// output that does not validate. check_json_schema refuses those schemas up front, naming the
// keyword and where it is, so a server answers 400 instead of unconstrained text (fail closed).
#pragma once

#include <nlohmann/json.hpp>

namespace inferd::structured {

// Throws inferd::Error ("unsupported JSON Schema keyword 'not' at /properties/a") for the
// first keyword or combination that would not be enforced, or that is malformed.
void check_json_schema(const nlohmann::ordered_json& schema);

// check_json_schema, then the schema to compile. String formats whose engine patterns accept
// values that are not valid (year 0000, February 30, a leap second, an IPv4 octet with a
// leading zero, a hostname label over 63 characters) or that never end (an e-mail address, a
// URI or a duration as long as a looping model makes it) become stricter, bounded patterns of
// ours; strings with minLength/maxLength up to 128 become patterns too (their masks are far
// cheaper).
nlohmann::ordered_json prepare_json_schema(const nlohmann::ordered_json& schema);

}  // namespace inferd::structured
