// Which browser origins the server lets call its API (server/http/cors.h).
#include <gtest/gtest.h>

#include "server/http/cors.h"

namespace inferd::server {
namespace {

TEST(Cors, DefaultAllowsOnlyThisMachine) {
  const CorsPolicy policy;
  for (const char* origin :
       {"http://localhost", "http://localhost:8080", "https://localhost:3000", "http://127.0.0.1",
        "http://127.0.0.1:3000", "http://[::1]", "http://[::1]:3000"})
    EXPECT_TRUE(policy.allows(origin)) << origin;
  for (const char* origin :
       {"", "null", "http://evil.com", "http://localhost.evil.com", "http://notlocalhost",
        "http://localhost:80x", "http://localhost:", "http://127.0.0.1.evil.com", "ftp://localhost",
        "http://web.mydomain.fr", "localhost", "http://localhost:1234567"})
    EXPECT_FALSE(policy.allows(origin)) << origin;
}

TEST(Cors, ConfiguredOriginsAreExactAndStarIsAny) {
  const CorsPolicy listed(" https://app.example.com/ , localhost");
  EXPECT_TRUE(listed.allows("https://app.example.com"));
  EXPECT_TRUE(listed.allows("http://localhost:5173"));
  EXPECT_FALSE(listed.allows("http://app.example.com"));
  EXPECT_FALSE(listed.allows("https://app.example.com.evil.com"));
  const CorsPolicy only("https://app.example.com");
  EXPECT_FALSE(only.allows("http://localhost:8080"));  // listing origins replaces the default
  const CorsPolicy any("*");
  EXPECT_TRUE(any.allows("http://web.mydomain.fr"));
  EXPECT_FALSE(any.allows(""));  // no Origin header: not a browser's cross-origin call
}

}  // namespace
}  // namespace inferd::server
