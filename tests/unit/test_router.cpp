// The server's choice of replica (dp and hybrid serving): a free slot first, then a replica that
// recently ran a prompt with the same start of at least a tile, then the least loaded, then the
// lowest index.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "meshnn/server/router.hpp"

namespace meshnn::server {
namespace {

std::vector<int32_t> prompt(int32_t first, size_t length) {
  std::vector<int32_t> p(length);
  std::iota(p.begin(), p.end(), first);
  return p;
}

TEST(Router, PrefersAFreeSlotThenTheLeastLoaded) {
  Router router(2, 1);
  EXPECT_EQ(router.route(prompt(0, 8)), 0);
  EXPECT_EQ(router.route(prompt(100, 8)), 1);  // replica 0's one slot is taken
  EXPECT_EQ(router.route(prompt(200, 8)), 0);  // both full, equally loaded: the lower index
  EXPECT_EQ(router.route(prompt(300, 8)), 1);
  router.ended(1);
  EXPECT_EQ(router.running(1), 1);
  EXPECT_EQ(router.route(prompt(400, 8)), 1);  // the less loaded
}

TEST(Router, SendsAPromptWhereItsStartRanRecently) {
  Router router(2, 2);
  const std::vector<int32_t> conversation = prompt(1, 40);
  EXPECT_EQ(router.route(prompt(500, 40)), 0);
  EXPECT_EQ(router.route(conversation), 1);  // the less loaded
  router.ended(1);
  router.ended(0);
  EXPECT_EQ(router.route(prompt(900, 10)), 0);  // a new prompt, loads equal: the lower index
  // The conversation's next turn goes back to replica 1, although replica 0 is no busier.
  std::vector<int32_t> next = conversation;
  next.insert(next.end(), {7, 8, 9});
  EXPECT_EQ(router.route(next), 1);
  // A start shorter than a tile (32 tokens) does not count: the less loaded replica takes it.
  router.ended(0);
  EXPECT_EQ(router.route(prompt(1, 20)), 0);
  // A replica without a free slot is passed over, whatever it ran.
  EXPECT_EQ(router.route(next), 1);  // replica 1 now runs two of its two slots
  EXPECT_EQ(router.route(next), 0);
}

}  // namespace
}  // namespace meshnn::server
