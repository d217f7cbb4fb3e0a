// Where `train` finds the files a build comes with when no flag names them: the demo corpus
// (--data) and the engine profile (--profile).
#pragma once

#include <string>

namespace hydraulis::tools {

// build/<preset>/demo-corpus, beside the build's tools/ directory (scripts/build.sh makes it);
// "demo-corpus" when the executable's path cannot be read.
std::string DefaultCorpusPrefix();

// The bundled engine profile (kEngineProfile): relative to the working directory (the
// repository, where the commands run by default), else in the source tree the build
// directory belongs to.
std::string EngineProfilePath();

}  // namespace hydraulis::tools
