-- Nudge 0006: leaderboards. leaderboard-refresh keeps fitcircle_leaderboard_entries for every
-- circle and period (seed 003, Feature 3).

-- Weight-loss circles rank their monthly and all-time boards by the weight lost (seed 003: "Total
-- weight lost this month", "Total weight lost since joining"), in the unit the members submit.
alter table fitcircle_leaderboard_entries drop constraint fitcircle_leaderboard_entries_metric_type_check;
alter table fitcircle_leaderboard_entries add constraint fitcircle_leaderboard_entries_metric_type_check
    check (metric_type in ('steps', 'weight_loss_pct', 'checkin_streak', 'weight_lost'));

-- What leaderboard-refresh knows of each board (a circle's period): when it last looked at it
-- (checked_at, for the seed's cadence), a digest of everything the board is computed from (inputs:
-- the roster, the weights, the submissions of the board and of the period before it), so that a
-- refresh with nothing new reads and writes nothing more, when its entries last changed, and
-- whether it holds its final ranks (final: refreshed after the period ended and the late
-- submissions' grace passed; only a backfill recomputes it then).
create table leaderboard_boards (
    fitcircle_id  uuid not null references fitcircles(id) on delete cascade,
    period        text not null check (period in ('daily', 'weekly', 'monthly', 'all_time')),
    period_start  date not null,
    inputs        text not null,
    checked_at    timestamptz not null,
    changed_at    timestamptz,
    final         boolean not null default false,
    primary key (fitcircle_id, period, period_start)
);

-- leaderboard-refresh reads only the circles whose boards can be due: started, and not ended
-- long ago.
create index idx_fitcircles_ends_on on fitcircles(ends_on);

-- A board reads its circle's submissions of a range of days (the unique key leads with the user).
create index idx_submissions_circle_day on fitcircle_data_submissions(fitcircle_id, submission_date);

-- The movement notification's throttle reads a member's recent ones.
create index idx_outbox_user_type on notification_outbox(user_id, notification_type, deliver_after);
