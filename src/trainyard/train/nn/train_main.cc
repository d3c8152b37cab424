// trainyard-train: the native trainer's program. `trainyard train config.yaml` runs it; as a
// job's command it picks up the job's run, checkpoints and resume point from the environment.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>

#include "trainyard/train/nn/trainer.h"
#include "trainyard/train/train_config.h"

int main(int argc, char** argv) {
  CLI::App app{
      "Fine-tunes a Llama- or GPT-2-family model (LoRA or full) on JSONL instruction or "
      "classification data. Inside a Trainyard job, metrics go to the job's MLflow run, "
      "checkpoints to the server, and a restarted attempt resumes exactly from "
      "TRAINYARD_RESUME_FROM.",
      "trainyard train"};
  std::string config_path;
  trainyard::train::TrainerOptions options;
  int64_t max_steps = -1;
  std::string output_dir;
  app.add_option("config", config_path, "the training config (YAML)")->required();
  app.add_flag("--resume", options.resume,
               "continue from the latest checkpoint in the output directory (outside a job)");
  app.add_option("--resume-from", options.resume_from,
                 "continue from this checkpoint (trainyard-checkpoint://PROJECT/JOB/STEP)");
  app.add_option("--max-steps", max_steps, "override training.max_steps");
  app.add_option("--output-dir", output_dir, "override output.dir");
  app.add_option("--exit-after-steps", options.stop_after_steps,
                 "testing aid: exit with code 3 after this many steps, as a crash would");
  CLI11_PARSE(app, argc, argv);

  auto config = trainyard::train::LoadTrainConfig(config_path);
  if (!config.ok()) {
    std::cerr << "error: " << config.status().message() << "\n";
    return 2;
  }
  if (max_steps >= 0) config->max_steps = max_steps;
  if (!output_dir.empty()) config->output_dir = output_dir;
  auto code = trainyard::train::RunTrainer(*config, options);
  if (!code.ok()) {
    std::cerr << "error: " << code.status().message() << "\n";
    return 1;
  }
  return *code;
}
