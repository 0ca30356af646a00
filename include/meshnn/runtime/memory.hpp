// This process's memory use, for reports (Linux: /proc/self/statm and getrusage).
#pragma once

#include <cstddef>

namespace meshnn {

size_t current_rss_bytes();  // resident set size now
size_t peak_rss_bytes();     // highest resident set size so far

}  // namespace meshnn
