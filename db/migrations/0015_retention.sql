-- Nudge 0015: what prune (jobs/prune.json) reads its chunks through: each bounded table by the
-- age of its rows, so that finding the oldest few thousand costs an index range, not a scan of
-- the table. (On a large existing database, these take a while to build; the jobs wait for them.)
create index idx_outbox_finished_created on notification_outbox (created_at)
    where status in ('sent', 'failed', 'suppressed', 'cancelled');
create index idx_notif_created on notification_logs (created_at);
create index idx_push_log_sent on push_log (sent_at);
create index idx_llm_calls_called on llm_calls (called_at);
create index idx_boards_daily_start on leaderboard_boards (period_start, fitcircle_id) where period = 'daily';
create index idx_leaderboard_daily_start on fitcircle_leaderboard_entries (period_start, id) where period = 'daily';
create index idx_job_work_done on job_work (done_at);
create index idx_job_runs_started on job_runs (started_at);

-- A failure is recorded once a day per job, item and reason, not once a run: the ledger finds the
-- day's earlier record of the same item through this index.
create index idx_job_run_failures_item on job_run_failures (item_id);
