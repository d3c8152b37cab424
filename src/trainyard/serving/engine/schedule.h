// The engine loop's scheduling policy, as pure functions: which waiting requests join the
// running batch, and how the prompts admitted together are split into prefill forwards. Inputs
// in, a decision out (no model, no clock), so the policy is tested without running a model.
//
// Between decode steps the loop admits every waiting request that fits (AdmitCount), prefills
// them in the forwards PlanPrefill gives (shortest prompts first; each forward's sequences get
// their first token when it ends), then decodes every running sequence as one batch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace trainyard::serving {

// How many of the waiting requests (`waiting[i]`: request i's sequences, its n choices), in
// arrival order, join `running` sequences under `max_batch`: they are taken until the first
// that does not fit, which waits for sequences to finish. A request is admitted alone into an
// empty batch even when its n exceeds max_batch.
size_t AdmitCount(int running, const std::vector<int>& waiting, int max_batch);

struct PrefillBudget {
  // Tokens of one forward, padding included (its sequences are padded to the longest): past
  // some hundreds on a CPU (thousands on a GPU) a larger forward gains no throughput but holds
  // back the first tokens of every sequence in it.
  int64_t tokens = 256;
  int64_t heads = 1;  // attention heads: a forward's scores are sequences × heads × longest²
  int64_t scores = int64_t{1} << 27;  // floats of attention scores in one forward (512 MiB)
};

// The prefill forwards for prompts of `lengths` tokens: groups of indices into `lengths`, in
// the order to run them. Shortest prompts first (the first tokens of most requests come
// soonest: the order that minimises the mean and median time to first token for a fixed cost
// per token). A group grows while padding to its longest prompt at most doubles its tokens and
// it stays within the budget; a prompt over the budget runs alone. Ties keep arrival order.
std::vector<std::vector<size_t>> PlanPrefill(const std::vector<int64_t>& lengths,
                                             const PrefillBudget& budget);

// The budget the engine uses on a CPU or a GPU, for a model with `heads` attention heads.
PrefillBudget DefaultPrefillBudget(bool cpu, int64_t heads);

}  // namespace trainyard::serving
