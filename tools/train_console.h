// What `train` prints on stdout: the run's set-up, a line per step and per evaluation (rank
// 0), and the closing summary.
#pragma once

#include "hydraulis/runtime/job/training_job.h"
#include "hydraulis/runtime/job/training_run.h"
#include "prediction_error.h"

namespace hydraulis::tools {

// Once the run is built: the GPU each rank took (every GPU rank: a node where all ranks
// name cuda:0 is misconfigured), then on rank 0 where the profile came from when it was
// derived rather than given.
void PrintRunStart(const TrainingRun& run, int world_size);

// One step's line (loss, learning rate, strategy, measured and predicted time), flushed.
void PrintStep(const TrainingStepRecord& r);

// One evaluation's line: held-out loss and perplexity.
void PrintEvaluation(const EvaluationRecord& e);

// The closing summary: the tokens lost and steps skipped over the run, and how close the
// predicted step times came to the measured ones over its last steps.
void PrintRunEnd(const TrainingJob::Totals& t, const TrainingRunOptions& options,
                 const PredictionError& prediction);

}  // namespace hydraulis::tools
