-- Version 19: one index fewer for every report to update.
-- A report writes finished_us (and state) on its host_tasks row, and each
-- index over those columns is one more b-tree delete and insert in the
-- report's transaction. host_tasks_by_island_finish (version 10) served
-- one query, an island's utilization window, which host_tasks_by_finish
-- (version 11) serves as well: the window is the last few seconds, so its
-- range holds only recent rows, and the island is a filter on them.
DROP INDEX host_tasks_by_island_finish;
