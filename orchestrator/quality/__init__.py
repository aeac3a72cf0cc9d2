"""Quality probes beside the speed cells (issue 15 items 3-4): a matrix's `quality:` names a
file of questions with expected answers; every config answers each once, the answers are
graded and stored in their own table, and reports put accuracy next to tok/s."""
