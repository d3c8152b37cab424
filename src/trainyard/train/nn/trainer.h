// The native trainer: LoRA or full fine-tuning of a CausalLM on instruction or
// classification data, built into the platform (MLflow run, checkpoints, heartbeats,
// preemption, data parallelism).
//
// One training step = grad_accum_steps micro-batches on each of the world_size ranks; the
// loss is the mean over the global step's response tokens, so N ranks with micro-batch b
// compute the same update as one rank with micro-batch N·b. Rank 0 logs and saves.
//
// Exact resume: a checkpoint holds the trainable parameters, the AdamW moments, the data
// iterator's position and the step; dropout draws from a generator re-seeded from (seed,
// step, micro-batch, rank), so a resumed run continues with the very losses an uninterrupted
// run would have had.
//
// SIGTERM / SIGINT: the current step finishes, a checkpoint is saved (synchronously) and the
// program exits with 128 + the signal.
#pragma once

#include <string>

#include "trainyard/common/status.h"
#include "trainyard/train/train_config.h"

namespace trainyard::train {

struct TrainerOptions {
  bool resume = false;           // outside a job: continue from the output dir's latest checkpoint
  std::string resume_from;       // a trainyard-checkpoint:// URI (overrides TRAINYARD_RESUME_FROM)
  int64_t stop_after_steps = 0;  // testing aid: exit (like a crash, code 3) after this many steps
};

// Runs the whole training; returns the process exit code (0 done, 128+N after signal N).
// Errors before training starts are returned as a Status.
Result<int> RunTrainer(const TrainConfig& config, const TrainerOptions& options);

}  // namespace trainyard::train
