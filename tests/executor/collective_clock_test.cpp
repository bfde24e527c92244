// CollectiveClock (executor/runtime/comm.h): a rank's time in each collective split into the wait
// for the last rank to arrive and the transfer after it, from the ranks' exchanged arrival times.
// The other rank is played by a communicator whose maxima include its canned arrivals.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "executor/runtime/comm.h"

namespace oomb::executor {
namespace {

// Rank 0 of 2, the other rank's contribution to every max-reduction given in advance: first the
// call counts (n, -n), then its arrival times.
class TwoRanks final : public Communicator {
 public:
  TwoRanks(std::vector<double> other_counts, std::vector<double> other_arrivals, bool one_host = true)
      : counts_(std::move(other_counts)), arrivals_(std::move(other_arrivals)), one_host_(one_host) {}
  int rank() const override { return 0; }
  int size() const override { return 2; }
  std::string name() const override { return "test"; }
  void all_reduce_sum(Tensor, int64_t) override {}
  void all_reduce_sum_host(double*, int64_t) override {}
  void all_reduce_max_host(double* data, int64_t n) override {
    const std::vector<double>& other = reductions_++ == 0 ? counts_ : arrivals_;
    ASSERT_EQ(static_cast<size_t>(n), other.size());
    for (int64_t i = 0; i < n; ++i) data[i] = std::max(data[i], other[static_cast<size_t>(i)]);
  }
  bool shares_clock() const override { return one_host_; }
  void broadcast_host(void*, int64_t, int) override {}
  void barrier() override {}
  int reductions() const { return reductions_; }

 private:
  std::vector<double> counts_, arrivals_;
  bool one_host_;
  int reductions_ = 0;
};

TEST(CollectiveClock, SplitsWaitForTheLastRankFromTransfer) {
  CollectiveClock clock;
  // Call 1: this rank arrives at 100, the other at 160, this one leaves at 200: waited 60, moved 40.
  // Call 2: this rank arrives last (300; the other at 250): no wait, 300 -> 330 transfer.
  clock.record(100, 200, 4096, {Op::layer_fwd, 1, 0, 3});
  clock.record(300, 330, 4096, {Op::layer_fwd, 1, 0, 3});
  TwoRanks other({2, -2}, {160, 250});
  clock.resolve(other);
  EXPECT_EQ(other.reductions(), 2);
  ASSERT_TRUE(clock.split());
  EXPECT_EQ(clock.calls()[0].last_arrival_ns, 160);
  EXPECT_EQ(clock.calls()[1].last_arrival_ns, 300);
  EXPECT_NEAR(clock.total_s(), 130e-9, 1e-15);
  EXPECT_NEAR(clock.wait_s(), 60e-9, 1e-15);
  EXPECT_NEAR(clock.transfer_s(), 70e-9, 1e-15);
  EXPECT_EQ(clock.calls()[0].tag.op, Op::layer_fwd);
  EXPECT_EQ(clock.calls()[0].tag.layer, 3);
}

TEST(CollectiveClock, AnArrivalAfterThisRanksExitIsClampedToIt) {
  // Clocks that disagree by more than the call (they must not, on one host) never give a negative
  // transfer: the wait is at most the call.
  CollectiveClock clock;
  clock.record(100, 200, 8, {});
  TwoRanks other({1, -1}, {500});
  clock.resolve(other);
  EXPECT_EQ(clock.calls()[0].last_arrival_ns, 200);
  EXPECT_NEAR(clock.transfer_s(), 0.0, 1e-15);
}

TEST(CollectiveClock, WithoutASharedClockOrWithDifferentCallsTheWaitIsUnknown) {
  CollectiveClock a;
  a.record(100, 200, 8, {});
  TwoRanks hosts({1, -1}, {150}, /*one_host=*/false);
  a.resolve(hosts);
  EXPECT_FALSE(a.split());
  EXPECT_NEAR(a.transfer_s(), 100e-9, 1e-15);  // all of it
  EXPECT_EQ(a.wait_s(), 0);

  CollectiveClock b;
  b.record(100, 200, 8, {});
  TwoRanks more_calls({2, -1}, {});  // the other rank made 2 calls, this one 1
  b.resolve(more_calls);
  EXPECT_FALSE(b.split());
  EXPECT_EQ(more_calls.reductions(), 1);  // the arrivals are not exchanged
}

TEST(CollectiveClock, OneRankHasNothingToWaitFor) {
  CollectiveClock clock;
  clock.record(10, 50, 8, {});
  const auto self = self_communicator();
  clock.resolve(*self);
  EXPECT_TRUE(clock.split());
  EXPECT_EQ(clock.wait_s(), 0);
  EXPECT_NEAR(clock.transfer_s(), 40e-9, 1e-15);
}

}  // namespace
}  // namespace oomb::executor
