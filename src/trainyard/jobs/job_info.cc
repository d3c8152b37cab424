#include "trainyard/jobs/job_info.h"

namespace trainyard::jobs {

std::string_view JobStateName(JobState s) {
  switch (s) {
    case JobState::kPending:
      return "PENDING";
    case JobState::kRunning:
      return "RUNNING";
    case JobState::kSucceeded:
      return "SUCCEEDED";
    case JobState::kFailed:
      return "FAILED";
    case JobState::kCancelled:
      return "CANCELLED";
  }
  return "PENDING";
}

Result<JobState> ParseJobState(std::string_view name) {
  for (JobState s : {JobState::kPending, JobState::kRunning, JobState::kSucceeded,
                     JobState::kFailed, JobState::kCancelled}) {
    if (JobStateName(s) == name) return s;
  }
  return Status::Internal("unknown job state " + std::string(name));
}

bool IsTerminal(JobState s) {
  return s == JobState::kSucceeded || s == JobState::kFailed || s == JobState::kCancelled;
}

std::string_view AttemptStateName(AttemptState s) {
  switch (s) {
    case AttemptState::kRunning:
      return "running";
    case AttemptState::kSucceeded:
      return "succeeded";
    case AttemptState::kFailed:
      return "failed";
    case AttemptState::kPreempted:
      return "preempted";
    case AttemptState::kCancelled:
      return "cancelled";
    case AttemptState::kLost:
      return "lost";
    case AttemptState::kHung:
      return "hung";
    case AttemptState::kTimedOut:
      return "timed_out";
  }
  return "failed";
}

Result<AttemptState> ParseAttemptState(std::string_view name) {
  for (AttemptState s : {AttemptState::kRunning, AttemptState::kSucceeded, AttemptState::kFailed,
                         AttemptState::kPreempted, AttemptState::kCancelled, AttemptState::kLost,
                         AttemptState::kHung, AttemptState::kTimedOut}) {
    if (AttemptStateName(s) == name) return s;
  }
  return Status::Internal("unknown attempt state " + std::string(name));
}

}  // namespace trainyard::jobs
