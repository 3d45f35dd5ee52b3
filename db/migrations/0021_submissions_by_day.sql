-- Nudge 0021: dispatch asks whether a user submitted on the day a submission reminder is for
-- (`DispatchRules.answered`, docs/jobs/dispatch.md): one index entry, not the user's whole history.
-- On its own, so that its build holds up only writes to the submissions, not to the tables 0020
-- alters; run it off-peak on a large `fitcircle_data_submissions`.
set local lock_timeout = '10s';
create index idx_submissions_user_day on fitcircle_data_submissions (user_id, submission_date);
drop index idx_submissions_user;
