#pragma once

// True when every rank passed: the ranks of a process suite agree on a
// verdict (an all_reduce of the failures), so all report and shrink alike.
bool all_ranks_passed(bool passed);
