-- Nudge 0012: the calls written without preview_due_at (triggers off, as a bulk load may be
-- written, or migration 0008's backfill not finished yet) are still read by preview-notifications:
-- by their call time, through this index, which holds only them.
create index idx_scheduled_calls_preview_due_unset on scheduled_calls(scheduled_at)
    where preview_due_at is null and status = 'pending' and preview_for is distinct from scheduled_at;
