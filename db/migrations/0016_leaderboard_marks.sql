-- Nudge 0016: leaderboard-refresh's change mark. A board's digest of its inputs (0006) covers
-- every submission of its days and the day before's board: two days for a daily board every
-- five minutes, two weeks for a weekly board every hour, two months for a monthly one daily.
-- Each circle now has a mark that every insert, change or delete of its submissions moves (a
-- truncate, every circle's); a board keeps the part of its digest that covers the submissions
-- with the mark it was taken at, and while the mark stands the job reuses that part instead of
-- reading the submissions again.

-- Marks come from one sequence, so no two changes give a circle the same mark, and a circle
-- deleted and made again never meets an old board's mark (only equality is ever compared).
--
-- A load that writes submissions with triggers off (session_replication_role = replica,
-- pg_restore --disable-triggers, a logical replication subscriber) must move the marks itself, as
-- db/seed.sql does: `insert into fitcircle_submission_marks select id, nextval(
-- 'fitcircle_submission_change') from fitcircles order by id on conflict (fitcircle_id) do update
-- set change = excluded.change`.
create sequence fitcircle_submission_change;

create table fitcircle_submission_marks (
    fitcircle_id uuid primary key references fitcircles(id) on delete cascade,
    change       bigint not null
);

alter table leaderboard_boards
    add column submissions_digest text,
    add column submissions_change bigint;

-- Moves the mark of every circle whose submissions the statement changed: once per statement and
-- circle, however many rows (a bulk load moves each circle's mark once). The job's own update of
-- `rank_after_submission` and `rank_change` changes no input and moves nothing. A circle being
-- deleted (its submissions go with it) gets no mark. Within a statement, marks are taken in
-- circle order. It runs as the owner of the tables (security definer), so the app's role needs no
-- right on the marks.
create function nudge_submissions_changed() returns trigger language plpgsql as $$
declare
    circles uuid[];
begin
    if tg_op = 'INSERT' then
        select array_agg(distinct fitcircle_id) into circles from new_submissions;
    elsif tg_op = 'DELETE' then
        select array_agg(distinct fitcircle_id) into circles from old_submissions;
    elsif tg_op = 'UPDATE' then
        select array_agg(distinct v.circle) into circles
          from old_submissions o full join new_submissions n on n.id = o.id
         cross join lateral (values (o.fitcircle_id), (n.fitcircle_id)) v(circle)
         where v.circle is not null
           and (o.fitcircle_id, o.user_id, o.submission_date, o.steps, o.weight, o.submitted_at)
               is distinct from (n.fitcircle_id, n.user_id, n.submission_date, n.steps, n.weight, n.submitted_at);
    else
        -- A truncate: every circle's submissions are gone, and every circle gets a new mark.
        select array_agg(id) into circles from fitcircles;
    end if;
    insert into fitcircle_submission_marks (fitcircle_id, change)
    select c.id, nextval('fitcircle_submission_change')
      from unnest(circles) as c(id)
     where exists (select 1 from fitcircles f where f.id = c.id)
     order by c.id
    on conflict (fitcircle_id) do update set change = excluded.change;
    return null;
end
$$ security definer set search_path from current;

create trigger fitcircle_data_submissions_marked_new after insert on fitcircle_data_submissions
    referencing new table as new_submissions
    for each statement execute function nudge_submissions_changed();
create trigger fitcircle_data_submissions_marked after update on fitcircle_data_submissions
    referencing old table as old_submissions new table as new_submissions
    for each statement execute function nudge_submissions_changed();
create trigger fitcircle_data_submissions_marked_deleted after delete on fitcircle_data_submissions
    referencing old table as old_submissions
    for each statement execute function nudge_submissions_changed();
create trigger fitcircle_data_submissions_marked_truncated after truncate on fitcircle_data_submissions
    for each statement execute function nudge_submissions_changed();
