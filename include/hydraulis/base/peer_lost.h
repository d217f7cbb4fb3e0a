// The words that mark a rank's failure as a consequence of another rank's: shared by the
// communicator that writes them and the launcher that reads them.
#pragma once

#include <string_view>

namespace hydraulis {

// Every error of a rank that failed because a peer rank went away (a collective's closed
// connection or timeout) carries these words: the launcher reports such an error only when
// no rank wrote one of its own, which is then the cause.
inline constexpr std::string_view kPeerRankLostText = "a peer rank may have exited";

}  // namespace hydraulis
