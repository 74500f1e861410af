-- Version 11: device time by tenant (DESIGN Part D). Each succeeded host
-- task adds its devices' busy time (inputs ready -> finished, times its
-- shard count) to its job's tenant here (tenant_id 0: jobs without a
-- tenant), for atoll_tenant_device_seconds_total; GET /v1/stats/tenants
-- reads windows of recent host tasks through host_tasks_by_finish.
CREATE TABLE tenant_usage (
  tenant_id  INTEGER PRIMARY KEY,
  device_us  INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX host_tasks_by_finish ON host_tasks(finished_us);
