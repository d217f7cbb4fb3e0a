// What `propose` prints on stderr once it has its strategies (unless --quiet).
#pragma once

#include "hydraulis/propose/propose.h"
#include "propose_args.h"

namespace hydraulis::tools {

// A line for the proposal (and one when --top-documents was capped), then a line per
// strategy: its name, layout, the documents it serves and its share of a batch.
void PrintProposalSummary(const Proposal& p, const ProposeArgs& a);

}  // namespace hydraulis::tools
