-- Nudge seed data: `nudge seed --users N --seed S --now T`.
--
-- The Swift side replaces {{users}}, {{seed}} and {{now}} and runs this whole text as one
-- multi-statement string, inside one transaction, on an empty migrated database. Plain SQL (two DO
-- blocks drop and rebuild indexes, see "Indexes"): helpers live in pg_temp and temporary tables are
-- dropped at commit, so only data rows remain.
--
-- Determinism: nothing here reads the clock or a random generator, and every column is set
-- explicitly. Pseudo-random numbers are pg_temp.r(key, field): a 53-bit uniform from PostgreSQL's
-- hashint8extended of the key, salted with the seed and the field number. User ids are
-- md5(seed ':users:' n); the rows that belong to a user get ids made of the first 64 bits of the
-- user's id, a per-table tag and a row number.
--
-- History ends at {{now}}: no timestamp after it (except the scheduled_at of pending calls, which
-- are the calls of the next hours), no tracking date after the user's local today.
--
-- Streaks follow validate-streaks' rules exactly (see "Streak replay" below).
--
-- Speed (100,000 users in well under a minute): the expensive parts are the 2.6 million tracking
-- rows and writing rows at all. Each user-day is evaluated once (table sd); set-based statements
-- avoid per-row re-evaluation with OFFSET 0 levels and SRFs in the select list (a lateral VALUES
-- list rebuilds its expressions for every outer row); indexes are built after the load.

set local jit = off;
set local work_mem = '256MB';

-- A superuser seeds without firing the foreign-key triggers (as pg_restore --disable-triggers
-- does): every reference is built consistent, and this halves the time of a large seed. Anyone
-- else seeds with the checks on. Restored at the end of this script.
create temp table seed_saved_settings on commit drop as
    select current_setting('session_replication_role') as srr;
select set_config('session_replication_role', 'replica', true)
  from pg_roles where rolname = current_user and rolsuper;

-- New files for the load: TRUNCATE gives a table a new relfilenode, and on a server with
-- wal_level = minimal (scripts/pg's private servers) rows written to a file created in the same
-- transaction skip the WAL, which on a server with fsync on is a third of the seeding time.
-- Only empty tables are truncated, so nothing is lost (and no non-empty table can reference one).
do $seed_truncate$
declare
    t text;
    is_empty boolean;
    empty_tables text[] := '{}';
begin
    for t in select format('%I', tablename) from pg_tables where schemaname = 'public' order by tablename loop
        execute format('select not exists (select 1 from %s)', t) into is_empty;
        if is_empty then
            empty_tables := empty_tables || t;
        end if;
    end loop;
    if cardinality(empty_tables) > 0 then
        execute 'truncate ' || array_to_string(empty_tables, ', ');
    end if;
end
$seed_truncate$;

-- Indexes: building an index once over loaded rows costs a fraction of maintaining it row by row,
-- so the tables filled here lose their indexes (primary keys and unique constraints included)
-- for the load, and get them back at the end exactly as the catalog defined them (definitions
-- read from it here, not copied from the schema). Kept: the indexes a foreign key relies on.
create temp table seed_ix on commit drop as
select i.indrelid::regclass::text as tbl, i.indexrelid::regclass::text as idx, c.conname as con,
       case when c.oid is not null
            then format('alter table %s add constraint %I %s', i.indrelid::regclass, c.conname, pg_get_constraintdef(c.oid))
            else pg_get_indexdef(i.indexrelid) end as ddl
  from pg_index i
  left join pg_constraint c on c.conindid = i.indexrelid and c.conrelid = i.indrelid and c.contype in ('p', 'u', 'x')
 where i.indrelid = any (array['daily_tracking', 'user_streaks', 'user_badges', 'daily_goals', 'weekly_goals',
                               'fitcircle_members', 'fitcircle_data_submissions', 'fitcircle_leaderboard_entries',
                               'user_push_tokens', 'notification_preferences', 'email_preferences', 'email_logs',
                               'scheduled_calls', 'notification_logs', 'context_profiles', 'conversations', 'messages',
                               'learning_signals', 'pattern_cache', 'push_log']::regclass[])
   and not exists (select 1 from pg_constraint f where f.contype = 'f' and f.conindid = i.indexrelid);
do $seed_ix$
declare x record;
begin
    for x in select * from seed_ix loop
        if x.con is not null then
            execute format('alter table %s drop constraint %I', x.tbl, x.con);
        else
            execute format('drop index %s', x.idx);
        end if;
    end loop;
end
$seed_ix$;

-- Helpers ------------------------------------------------------------------------------------------

-- Uniform [0, 1) from (key, field), salted with the seed.
create function pg_temp.r(k bigint, f int) returns float8 language sql immutable as
$f$ select ((hashint8extended(k, hashint8extended(({{seed}})::bigint, f)) >> 11)
            & 9007199254740991)::float8 / 9007199254740992.0 $f$;

-- Standard normal from (key, field) and (key, field + 1) (Box-Muller).
create function pg_temp.nz(k bigint, f int) returns float8 language sql immutable as
$f$ select sqrt(-2.0 * ln(1.0 - pg_temp.r(k, f))) * cos(6.283185307179586 * pg_temp.r(k, f + 1)) $f$;

-- A non-negative float rounded to 1 or 2 decimals, as numeric: round(x::numeric, 1) without the
-- float-to-decimal-string conversion, which costs more than all the rest (the two differ only for an
-- x within about 1e-12 of a tie).
create function pg_temp.dec1(x float8) returns numeric language sql immutable as
$f$ select floor(x * 10 + 0.5)::int8::numeric * 0.1 $f$;
create function pg_temp.dec2(x float8) returns numeric language sql immutable as
$f$ select floor(x * 100 + 0.5)::int8::numeric * 0.01 $f$;

-- The id of a user's row in some table: the user's first 64 bits, the table tag, a row number.
create function pg_temp.cid(pfx text, tag int, j bigint) returns uuid language sql immutable as
$f$ select (pfx || lpad(to_hex(tag), 4, '0') || '-' || lpad(to_hex(j), 12, '0'))::uuid $f$;

-- Highest set bit of a non-negative bigint (-1 for 0).
create function pg_temp.hibit(m bigint) returns int language sql immutable as
$f$ select case when m = 0 then -1 else 64 - position('1' in m::bit(64)::text) end $f$;

-- ISO Monday of a date.
create function pg_temp.mon(d date) returns date language sql immutable as
$f$ select d - (((d - date '2000-01-03') % 7 + 7) % 7) $f$;

-- A device token: APNs tokens are 64 hex digits, FCM tokens 'id:APA91b...' (152 characters).
create function pg_temp.tok(n int, j int, platform text) returns text language sql immutable as
-- (explicit ::text: `text || int` is only stable, and an immutable SQL function whose body is not
-- immutable is not inlined: called, it costs several times as much)
$f$ select case when platform = 'ios'
                then md5(({{seed}})::text || ':apns:' || n::text || ':' || j::text)
                     || md5(({{seed}})::text || ':apns2:' || n::text || ':' || j::text)
                else replace(replace(replace(encode(decode(md5(({{seed}})::text || ':fcm:' || n::text || ':' || j::text), 'hex'),
                                                    'base64'), '+', '-'), '/', '_'), '=', '')
                     || ':APA91b'
                     || replace(replace(replace(replace(encode(decode(repeat(md5(({{seed}})::text || ':fcm1:' || n::text || ':' || j::text)
                                                                             || md5(({{seed}})::text || ':fcm2:' || n::text || ':' || j::text), 3),
                                                                      'hex'), 'base64'),
                                                chr(10), ''), '+', '-'), '/', '_'), '=', '')
                end $f$;

-- Time zones: name, weight, probability that a user there speaks French -------------------------

create temp table sz on commit drop as
select ord::int as zi, name, w::float8 as w, fr::float8 as fr
  from unnest(
    array['America/New_York', 'Europe/Paris', 'Australia/Lord_Howe', 'Asia/Kolkata',
          'Asia/Kathmandu', 'Pacific/Kiritimati', 'Pacific/Pago_Pago', 'Pacific/Chatham',
          'America/Los_Angeles', 'America/Chicago', 'America/Denver', 'America/Phoenix',
          'America/Anchorage', 'Pacific/Honolulu', 'America/Mexico_City', 'America/Sao_Paulo',
          'America/St_Johns', 'America/Toronto', 'America/Halifax', 'America/Argentina/Buenos_Aires',
          'America/Bogota', 'Europe/London', 'Europe/Berlin', 'Europe/Madrid',
          'Europe/Brussels', 'Europe/Zurich', 'Europe/Moscow', 'Africa/Lagos',
          'Africa/Johannesburg', 'Africa/Casablanca', 'Africa/Abidjan', 'Indian/Reunion',
          'Asia/Tehran', 'Asia/Dubai', 'Asia/Singapore', 'Asia/Shanghai',
          'Asia/Tokyo', 'Asia/Seoul', 'Australia/Perth', 'Australia/Adelaide',
          'Australia/Sydney', 'Pacific/Auckland', 'Pacific/Tahiti', 'UTC'],
    array[12, 9, 0.3, 3,
          0.5, 0.3, 0.3, 0.3,
          8, 6, 2.5, 1,
          0.6, 0.6, 2, 2,
          0.4, 3, 0.5, 1,
          1, 6, 4, 2,
          1.5, 1, 1, 1,
          1, 0.7, 0.5, 0.4,
          0.5, 1, 1, 2,
          2, 1, 0.8, 0.8,
          2, 1, 0.3, 0.5],
    array[0.01, 0.8, 0.01, 0.01,
          0.01, 0.01, 0.01, 0.01,
          0.01, 0.01, 0.01, 0.01,
          0.01, 0.01, 0.01, 0.01,
          0.02, 0.2, 0.05, 0.01,
          0.01, 0.03, 0.03, 0.02,
          0.5, 0.3, 0.01, 0.02,
          0.01, 0.5, 0.7, 0.9,
          0.01, 0.02, 0.01, 0.01,
          0.01, 0.01, 0.01, 0.01,
          0.01, 0.01, 0.8, 0.03]) with ordinality as z(name, w, fr, ord);

-- Users (attributes that drive everything else) -------------------------------------------------
-- Field numbers of pg_temp.r: users 1-99, circles 100-199, days 200-299, other tables 300+.

create temp table su0 on commit drop as
with zc as (
    select count(*)::int as nz,
           (select array_agg(c order by zi)
              from (select zi, sum(w) over (order by zi) / sum(w) over () as c from sz) x
             where zi < (select count(*) from sz)) as cum
      from sz),
-- (OFFSET 0 keeps each step's values from being recomputed wherever the next step uses them)
b as (
    select n,
           md5(({{seed}})::text || ':users:' || n)::uuid as id,
           case when n <= zc.nz then n else width_bucket(pg_temp.r(n, 1), zc.cum) + 1 end as zi,
           n > zc.nz and pg_temp.r(n, 2) < 0.02 as notz,
           pg_temp.r(n, 6) as r_sg, pg_temp.r(n, 7) as r_sg2,
           pg_temp.r(n, 5) as r_en, pg_temp.r(n, 8) as r_act, pg_temp.r(n, 10) as r_hab
      from generate_series(1, {{users}}) n cross join zc
    offset 0),
c as (
    select b.*,
           case when notz then null else z.name end as tz,
           case when notz then 'UTC' else z.name end as tzn,
           case when r_sg < 0.08 then r_sg2 * 7
                when r_sg < 0.22 then 7 + r_sg2 * 53
                else 60 + r_sg2 * 340 end as xdays,
           case when pg_temp.r(n, 3) < (case when notz then 0.05 else z.fr end) then 'fr' else 'en' end as locale
      from b join sz z using (zi)
    offset 0),
d as (
    select c.*,
           {{now}} - make_interval(secs => floor(xdays * 86400)) as created_at,
           xdays < 7 as isnew,
           ({{now}} at time zone tzn) as lt
      from c
    offset 0),
e as (
    select d.*, created_at at time zone tzn as sl,
           pg_temp.r(n, 4) as r_pe, pg_temp.r(n, 9) as r_ba, pg_temp.r(n, 11) as r_hm, pg_temp.r(n, 16) as r_al,
           pg_temp.r(n, 24) as r_mu, pg_temp.r(n, 40) as r_ph, pg_temp.r(n, 41) as r_pn, pg_temp.r(n, 42) as r_np,
           pg_temp.r(n, 44) as r_le, pg_temp.r(n, 45) as r_nt
      from d
    offset 0)
select n, id, left(id::text, 19) as pfx, tz, tzn, locale, created_at, isnew, lt,
       lt::date as today,
       extract(epoch from lt - lt::date)::float8 / 86400 as frac,
       sl,
       sl::date as sd,
       -- coach: Mama Rosa mostly for French speakers
       case when locale = 'fr' then (case when r_pe < 0.8 then 3 when r_pe < 0.9 then 1 else 2 end)
            else (case when r_pe < 0.5 then 1 when r_pe < 0.95 then 2 else 3 end) end as persona,
       -- engagement: 1 dedicated, 2 regular, 3 lapsing, 4 churned (new users are keen)
       case when isnew then (case when r_en < 0.35 then 1 when r_en < 0.85 then 2 else 3 end)
            else (case when r_en < 0.13 then 1 when r_en < 0.43 then 2 when r_en < 0.68 then 3 else 4 end) end as e,
       floor(r_al * (case when isnew then 5 else 45 end))::int as al,
       3 + floor(r_al * 240)::int as ca,
       0.9 + 0.1 * pg_temp.r(n, 18) as pu,
       -- activity: sedentary / moderate / active
       case when r_act < 0.3 then 1 when r_act < 0.75 then 2 else 3 end as act,
       case when r_act < 0.3 then 3000 + 2000 * r_ba
            when r_act < 0.75 then 6000 + 3000 * r_ba
            else 10000 + 4000 * r_ba end as base,
       0.75 + 0.4 * pg_temp.r(n, 19) as wkend,
       pg_temp.r(n, 20) < 0.07 as nosync,
       -- check-in habit, minutes after local midnight: morning, midday or evening
       case when r_hab < 0.45 then 420 + 150 * r_hm
            when r_hab < 0.6 then 720 + 90 * r_hm
            else 1140 + 210 * r_hm end as habit,
       pg_temp.r(n, 12) < 0.55 as wlogger,
       0.2 + 0.6 * pg_temp.r(n, 13) as pw,
       125 + 150 * power(pg_temp.r(n, 14), 1.4) as w0,
       -0.15 + 0.17 * pg_temp.r(n, 15) as trend,
       2.6 + 1.6 * pg_temp.r(n, 21) as mm,
       2.5 + 1.6 * pg_temp.r(n, 22) as em,
       0.3 + 0.6 * pg_temp.r(n, 23) as subp,
       case when r_mu < 0.45 then 1 when r_mu < 0.8 then 2 else 3 end as mu,
       row_number() over (order by hashint8extended(n, ({{seed}})::bigint), n) - 1 as pr,
       -- phone numbers (fictional ranges), channels, devices
       case when r_ph >= 0.85 then null
            when locale = 'fr' or tzn in ('Europe/Paris', 'Indian/Reunion')
                 then '+336' || lpad(floor(r_pn * 100000000)::bigint::text, 8, '0')
            when tzn = 'Europe/London' then '+447700900' || lpad(floor(r_pn * 1000)::int::text, 3, '0')
            else '+1555' || lpad(floor(r_pn * 10000000)::bigint::text, 7, '0') end as phone,
       case when r_ph >= 0.85 or r_np < 0.8 then 'push_only'
            when r_np < 0.87 then 'sms_only' else 'push_and_sms' end as npref,
       pg_temp.r(n, 43) >= 0.08 as push_enabled,
       case when r_le < 0.75 then 5 when r_le < 0.85 then 10
            when r_le < 0.92 then 15 when r_le < 0.97 then 2 else 0 end as lead,
       case when r_nt < 0.12 then 0 when r_nt < 0.77 then 1 else 2 end as ntok,
       case when pg_temp.r(n, 46) < 0.55 then 'ios' else 'android' end as plat1,
       case when pg_temp.r(n, 47) < 0.5 then 'ios' else 'android' end as plat2,
       pg_temp.r(n, 48) < 0.15 as legacy
  from e;

analyze su0 (pr, n);

-- FitCircles and their members --------------------------------------------------------------------

create temp table fc on commit drop as
with a as (
    select c,
           md5(({{seed}})::text || ':fitcircles:' || c)::uuid as id,
           case when pg_temp.r(c, 101) < 0.6 then 'steps' else 'weight_loss' end as ctype,
           (select name from sz where zi = 1 + floor(pg_temp.r(c, 102) * 24)::int % 24) as tz0,
           least(100, 5 + floor(95 * power(pg_temp.r(c, 103), 3.2)))::int as size0,
           floor(pg_temp.r(c, 104) * 100)::int - 7 as ago,
           (array[28, 42, 56, 84, 90])[1 + floor(pg_temp.r(c, 105) * 5)::int] as dur,
           (array['Morning', 'Sunrise', 'Office', 'Weekend', 'Lunchtime', 'Downtown', 'Riverside',
                  'Night Owl', 'Family', 'Spring', 'Summit', 'Coastal', 'Urban', 'Trail'])[1 + floor(pg_temp.r(c, 106) * 14)::int]
           || ' ' ||
           (array['Striders', 'Walkers', 'Warriors', 'Movers', 'Squad', 'Crew', 'Steppers',
                  'Shredders', 'Club', 'Circle', 'Pacers', 'Rebels'])[1 + floor(pg_temp.r(c, 107) * 12)::int] as name
      from generate_series(1, greatest(1, round({{users}} / 20.0)::int)) c),
b as (
    select a.*, ({{now}} at time zone tz0)::date as ct from a)
select c, id, ctype, tz0 as tz, name, ct,
       ct - ago as starts_on, ct - ago + dur - 1 as ends_on,
       case when ctype = 'steps' then 50000 + 5000 * floor(pg_temp.r(c, 108) * 11)::int end as goal,
       least({{now}} - interval '1 hour',
             ((ct - ago - 3 - floor(pg_temp.r(c, 109) * 18)::int) + time '12:00'
               + floor(pg_temp.r(c, 110) * 480) * interval '1 minute') at time zone tz0) as created_at,
       size0,
       sum(size0) over (order by c) - size0 as off
  from b;

create temp table fm on commit drop as
with pool as materialized (
    select greatest(1, least({{users}}, round((select sum(size0) from fc) / 2.5)::int)) as e),
slots as (
    -- slot q of the circles' concatenated rosters goes to pool user (q * P) mod E: distinct users
    -- within a circle, at most 3 circles a user (pass = q / E); a few spare slots per circle
    -- replace members who could not join (signed up after the circle ended).
    select fc.c, fc.size0, q, q - fc.off as pos, (q * 1000003) % pool.e as p, q / pool.e as pass
      from fc cross join pool
     cross join lateral generate_series(fc.off, fc.off + least(fc.size0 + 6, pool.e) - 1) q
     where q < 3 * pool.e),
m as (
    select s.c, s.pos, s.size0, s.pass < u.mu as wanted, u.n, fc.id as fitcircle_id, u.id as user_id,
           fc.ctype, fc.tz as ctz, fc.ct, fc.starts_on, fc.ends_on, fc.goal,
           greatest(fc.created_at, u.created_at) as lo,
           least((fc.ends_on + 1)::timestamp at time zone fc.tz, {{now}}) as hi,
           fc.starts_on > fc.ct as upcoming,
           u.tzn, u.w0, u.trend, u.today
      from slots s
      join fc on fc.c = s.c
      join su0 u on u.pr = s.p),
k as (
    select m.*, row_number() over (partition by c order by pos) as rj
      from m where lo < hi),
j as (
    select k.*,
           case when upcoming or pg_temp.r(n::bigint * 4096 + c, 111) < 0.7
                then lo + least(hi - lo, interval '2 days') * pg_temp.r(n::bigint * 4096 + c, 112)
                else lo + (hi - lo) * pg_temp.r(n::bigint * 4096 + c, 112) end as joined_at
      from k
     where rj <= 5 or (pos < size0 and wanted)),
l as (
    select j.*, row_number() over (partition by n order by fitcircle_id) as slot from j)
select l.*,
       case when pg_temp.r(n::bigint * 4096 + c, 113) < 0.05
            then joined_at + ({{now}} - joined_at) * (0.2 + 0.8 * pg_temp.r(n::bigint * 4096 + c, 114)) end as left_at,
       case when ctype = 'weight_loss'
            then round((w0 + trend * (59 - (today - (joined_at at time zone tzn)::date))
                        + 0.8 * pg_temp.nz(n::bigint * 4096 + c, 115))::numeric, 1) end as starting_weight,
       case when ctype = 'weight_loss'
            then round((w0 + trend * (59 - (today - (joined_at at time zone tzn)::date))
                        + 0.8 * pg_temp.nz(n::bigint * 4096 + c, 115))::numeric, 1)
                 - round((5 + 15 * pg_temp.r(n::bigint * 4096 + c, 116))::numeric, 1) end as target_weight
  from l
 where slot <= 3;

analyze fc (c);
analyze fm (n, c);

-- The users with their circle ranges (local dates on which they count as members).
create temp table su on commit drop as
with mr as (
    select n, slot, ctype, fitcircle_id, goal, starting_weight,
           greatest(starts_on, (joined_at at time zone tzn)::date) as lo_d,
           least(ends_on, today, coalesce((left_at at time zone tzn)::date - 1, today)) as hi_d
      from fm),
agg as (
    select n,
           max(lo_d) filter (where slot = 1) as m1lo, max(hi_d) filter (where slot = 1) as m1hi,
           max(lo_d) filter (where slot = 2) as m2lo, max(hi_d) filter (where slot = 2) as m2hi,
           max(lo_d) filter (where slot = 3) as m3lo, max(hi_d) filter (where slot = 3) as m3hi,
           -- the first steps circle and the first weight-loss circle the user counts in (slot order)
           coalesce(max(fitcircle_id::text) filter (where slot = 1 and ctype = 'steps' and hi_d >= lo_d),
                    max(fitcircle_id::text) filter (where slot = 2 and ctype = 'steps' and hi_d >= lo_d),
                    max(fitcircle_id::text) filter (where slot = 3 and ctype = 'steps' and hi_d >= lo_d))::uuid as sc_id,
           coalesce(max(goal) filter (where slot = 1 and ctype = 'steps' and hi_d >= lo_d),
                    max(goal) filter (where slot = 2 and ctype = 'steps' and hi_d >= lo_d),
                    max(goal) filter (where slot = 3 and ctype = 'steps' and hi_d >= lo_d)) as sc_goal,
           coalesce(max(fitcircle_id::text) filter (where slot = 1 and ctype = 'weight_loss' and hi_d >= lo_d),
                    max(fitcircle_id::text) filter (where slot = 2 and ctype = 'weight_loss' and hi_d >= lo_d),
                    max(fitcircle_id::text) filter (where slot = 3 and ctype = 'weight_loss' and hi_d >= lo_d))::uuid as wc_id
      from mr group by n),
-- Local midnights. A user's days are local days, and a local day is not always 24 hours: per
-- zone, the midnight of the first of its last 60 days (epoch seconds) and, when the offset changes
-- once in those days, from which day (tx) and by how much (dl). A zone whose offset changes more
-- than once (Morocco around Ramadan) gets fb: its days are converted one by one.
zl as (
    select name, j, m0,
           date_part('epoch', (d0 + j)::timestamp at time zone name) - m0 - 86400 * j as lin
      from (select name, d0, date_part('epoch', d0::timestamp at time zone name) as m0
              from (select name, ({{now}} at time zone name)::date - 59 as d0 from sz) z) z
     cross join generate_series(0, 59) j),
zt as (
    select name, min(m0) as m0, coalesce(min(j) filter (where lin <> 0), 60) as tx,
           coalesce((array_agg(lin order by j) filter (where lin <> 0))[1], 0) as dl
      from zl group by name),
zm as (
    select zt.name, zt.m0, zt.tx, zt.dl,
           bool_or(zl.lin <> case when zl.j >= zt.tx then zt.dl else 0 end) as fb
      from zt join zl using (name) group by 1, 2, 3, 4)
select u.*,
       greatest(u.sd, u.today - 59) as ws,
       greatest(u.today - 2, u.sd - 1) as st,
       u.today - greatest(u.sd, u.today - 59) as nd,
       greatest(u.today - 2, u.sd - 1) - greatest(u.sd, u.today - 59) as iend,
       pg_temp.mon(u.today) as mon_t,
       date_trunc('month', u.today)::date as mstart,
       extract(epoch from u.sl - u.sd)::float8 / 60 as slm,
       extract(epoch from u.lt - u.today)::float8 / 60 as ltm,
       agg.m1lo, agg.m1hi, agg.m2lo, agg.m2hi, agg.m3lo, agg.m3hi, agg.sc_id, agg.sc_goal, agg.wc_id,
       -- the local midnight of window day i (i = 0 at ws) is m0 + 86400 i, plus dl from i = tx on
       zm.m0 + 86400 * (59 - (u.today - greatest(u.sd, u.today - 59))) as m0,
       zm.tx - (59 - (u.today - greatest(u.sd, u.today - 59))) as tx,
       zm.dl, zm.fb
  from su0 u left join agg using (n) join zm on zm.name = u.tzn
 order by u.id;

analyze su (n);

-- Daily tracking, as a function of (user, day) -----------------------------------------------------

-- Probability that the app was opened on a day (a = days before local today, wd 0 = Monday).
create function pg_temp.popen(e int, al int, ca int, pu float8, a int, wd int) returns float8
language sql immutable as
$f$ select pu * (case e when 1 then 0.96::float8
                        when 2 then (case when wd >= 5 then 0.7::float8 else 0.8::float8 end)
                        when 3 then (case when a > al then 0.85::float8 else 0.14::float8 end)
                        else (case when a > ca then 0.75::float8 else 0.0::float8 end) end) $f$;

-- Steps of a day (the part of today so far for a = 0): the user's baseline times a day factor
-- (0.4-1.6, a few long-walk and sick days), less at the weekend for most.
create function pg_temp.stp(n int, nosync boolean, base float8, wkend float8, frac float8, a int, wd int)
returns int language sql immutable as
$f$ select case when nosync then null else
       least(25000, round(base
             * (0.4 + 0.6 * (pg_temp.r(n::bigint * 64 + a, 201) + pg_temp.r(n::bigint * 64 + a, 202)))
             * (case when pg_temp.r(n::bigint * 64 + a, 203) < 0.04 then 0.3::float8
                     when pg_temp.r(n::bigint * 64 + a, 203) > 0.96 then 1.7::float8 else 1.0::float8 end)
             * (case when wd >= 5 then wkend else 1.0 end)
             * (case when a = 0 then frac else 1.0 end)))::int end $f$;

-- About N(0, 1), cheaply: a scaled sum of two uniforms.
create function pg_temp.tri(k bigint, f int) returns float8 language sql immutable as
$f$ select (pg_temp.r(k, f) + pg_temp.r(k, f + 1) - 1.0) * 2.45 $f$;

-- The days of the last 60 (never before sign-up) on which the app was opened, each with the values
-- of its daily_tracking row but the streak. Computed once: the streak replay, the tracking rows,
-- the goals and the FitCircle submissions all read them. Inside the lateral subquery the user's
-- attributes are parameters, not columns copied along each level; each OFFSET 0 level computes a
-- value once for the levels above. Times are minutes after the local midnight `mid` (epoch
-- seconds; to_timestamp of whole seconds is exact). cs: a check-in that counts for the streak
-- (on or before settled_through); wr: 0 this week, 1 last week.
set local jit = on;
create temp table sd on commit drop as
select u.n, x.i, x.a, x.d, x.ci, x.ci and x.i <= u.iend as cs,
       case when x.d >= u.mon_t then 0 when x.d >= u.mon_t - 7 then 1 end as wr, x.wd,
       x.steps, x.weight, x.mood, x.energy, x.pds, x.pdsteps, x.sub,
       case when x.ci then least(to_timestamp(x.mid + floor(x.cim * 60)), {{now}}) end as cit,
       case when x.sub then to_timestamp(x.mid + floor(x.subm * 60)) end as sut,
       greatest(u.created_at, least(to_timestamp(x.mid + floor(x.clm * 60)), {{now}})) as cat,
       greatest(u.created_at, least(to_timestamp(x.mid + floor(x.ulm * 60)), {{now}})) as uat
  from su u
 cross join lateral (
    select i, a, d, wd, ci, mood, pdsteps, sub, subm, clm, cim, mid, steps,
           case when u.wlogger and pg_temp.r(k, 212) < u.pw
                then pg_temp.dec1(u.w0 + u.trend * (59 - a) + 0.5 * pg_temp.tri(k, 213)) end as weight,
           case when ci then greatest(1, least(5, round(u.em + 0.5 * (mood - u.mm) + 0.8 * pg_temp.tri(k, 210))))::int end as energy,
           case when pf then
                case when pdsteps is null then (case when mood >= 4 then 'great' when mood = 3 then 'ok' else 'could_be_better' end)
                     when pdsteps >= u.base * (0.95 + 0.2 * pg_temp.r(k, 216)) then 'great'
                     when pdsteps >= u.base * (0.6 + 0.2 * pg_temp.r(k, 216)) then 'ok'
                     else 'could_be_better' end end as pds,
           least(case when a = 0 then u.ltm end,
                 greatest(clm, case when ci or part then cim end, case when sub then subm end,
                          1230 + 149 * pg_temp.r(k, 221))) as ulm
      from (
        select s1.*,
               not u.nosync and a <= 6 and pg_temp.r(k, 217) < u.subp and (a > 0 or subm <= u.ltm)
                 and (coalesce(d between u.m1lo and u.m1hi, false) or coalesce(d between u.m2lo and u.m2hi, false)
                      or coalesce(d between u.m3lo and u.m3hi, false)) as sub,
               -- yesterday's steps, when the app was opened yesterday
               case when pf and a + 1 <= u.nd and pg_temp.r(k + 1, 206) < pg_temp.popen(u.e, u.al, u.ca, u.pu, a + 1, (wd + 6) % 7)
                    then pg_temp.stp(u.n, u.nosync, u.base, u.wkend, u.frac, a + 1, (wd + 6) % 7) end as pdsteps,
               pg_temp.stp(u.n, u.nosync, u.base, u.wkend, u.frac, a, wd) as steps
          from (
            select s0.*,
                   part0 and not ci as part,
                   case when ci or part0 then greatest(1, least(5, round(u.mm + 0.9 * pg_temp.tri(k, 208))))::int end as mood,
                   ci and pg_temp.r(k, 215) < 0.35 as pf,
                   least(1379.0, case when ci then cim + 2 + 10 * pg_temp.r(k, 218) else 1140 + 239 * pg_temp.r(k, 218) end) as subm,
                   greatest(least(360 + 180 * pg_temp.r(k, 219), cim - 1 - 20 * pg_temp.r(k, 220)),
                            case when d = u.sd then u.slm end) as clm
              from (
                select i, a, d, k, wd, cim,
                       (d > u.sd or cim >= u.slm + 10)
                         and pg_temp.r(k, 205) < (case u.e when 1 then 0.93::float8 when 2 then 0.68::float8
                                                        when 3 then (case when a > u.al then 0.7::float8 else 0.3::float8 end)
                                                        else 0.6::float8 end) as ci,
                       pg_temp.r(k, 207) < 0.03 as part0,
                       case when u.fb then date_part('epoch', d::timestamp at time zone u.tzn)
                            else u.m0 + 86400 * i + case when i >= u.tx then u.dl else 0 end end as mid
                  from (
                    select g as i, u.nd - g as a, u.ws + g as d, u.n::bigint * 64 + (u.nd - g) as k,
                           ((u.ws + g) - date '2000-01-03') % 7 as wd,
                           least(1379.0, greatest(360.0, u.habit + (pg_temp.r(u.n::bigint * 64 + (u.nd - g), 204) - 0.5) * 80.0)) as cim
                      from generate_series(greatest(0, u.nd - 59), case when u.e = 4 then least(u.nd, u.nd - u.ca - 1) else u.nd end) g
                    offset 0) s00
                 -- the app was opened that day (today: by now)
                 where pg_temp.r(k, 206) < pg_temp.popen(u.e, u.al, u.ca, u.pu, a, wd) and (a > 0 or cim <= u.ltm)
                offset 0) s0
            offset 0) s1
        offset 0) s2) x;
set local jit = off;

-- Per user: the check-ins the streak replay reads, the last day the app was opened, and the recent
-- steps, check-ins and weights the goals read.
create temp table sm on commit drop as
select u.n, coalesce(a.cmask, 0) as cmask, a.a_last,
       r.s_a0, r.s_a1, coalesce(r.ci_a0, false) as ci_a0, coalesce(r.ci_a1, false) as ci_a1,
       r.w_a0, r.w_a1, r.w_a2, r.avg_0, r.avg_1,
       coalesce(r.s_wk, 0) as s_wk, coalesce(r.c_wk, 0) as c_wk, coalesce(r.act_wk, 0) as act_wk,
       jsonb_strip_nulls(jsonb_build_object('Mon', r.t0, 'Tue', r.t1, 'Wed', r.t2, 'Thu', r.t3, 'Fri', r.t4,
                                            'Sat', r.t5, 'Sun', r.t6)) as j_wk,
       coalesce(r.s_pwk, 0) as s_pwk, coalesce(r.c_pwk, 0) as c_pwk, coalesce(r.act_pwk, 0) as act_pwk,
       jsonb_strip_nulls(jsonb_build_object('Mon', r.p0, 'Tue', r.p1, 'Wed', r.p2, 'Thu', r.p3, 'Fri', r.p4,
                                            'Sat', r.p5, 'Sun', r.p6)) as j_pwk
  from su u
  left join (
    select n, bit_or(1::bigint << i) filter (where cs) as cmask, min(a) as a_last
      from sd group by n) a using (n)
  left join (
    -- (the goals look two weeks back at most)
    select n,
           max(steps) filter (where a = 0) as s_a0,
           max(steps) filter (where a = 1) as s_a1,
           bool_or(ci) filter (where a = 0) as ci_a0,
           bool_or(ci) filter (where a = 1) as ci_a1,
           max(weight) filter (where a = 0) as w_a0,
           max(weight) filter (where a = 1) as w_a1,
           max(weight) filter (where a = 2) as w_a2,
           avg(steps) filter (where a between 1 and 7) as avg_0,
           avg(steps) filter (where a between 2 and 8) as avg_1,
           sum(steps) filter (where wr = 0) as s_wk,
           count(*) filter (where ci and wr = 0) as c_wk,
           count(*) filter (where steps >= 3000 and wr = 0) as act_wk,
           -- each day's steps, this week (t0 = Monday) and last week (p0)
           max(steps) filter (where wr = 0 and wd = 0) as t0, max(steps) filter (where wr = 0 and wd = 1) as t1,
           max(steps) filter (where wr = 0 and wd = 2) as t2, max(steps) filter (where wr = 0 and wd = 3) as t3,
           max(steps) filter (where wr = 0 and wd = 4) as t4, max(steps) filter (where wr = 0 and wd = 5) as t5,
           max(steps) filter (where wr = 0 and wd = 6) as t6,
           max(steps) filter (where wr = 1 and wd = 0) as p0, max(steps) filter (where wr = 1 and wd = 1) as p1,
           max(steps) filter (where wr = 1 and wd = 2) as p2, max(steps) filter (where wr = 1 and wd = 3) as p3,
           max(steps) filter (where wr = 1 and wd = 4) as p4, max(steps) filter (where wr = 1 and wd = 5) as p5,
           max(steps) filter (where wr = 1 and wd = 6) as p6,
           sum(steps) filter (where wr = 1) as s_pwk,
           count(*) filter (where ci and wr = 1) as c_pwk,
           count(*) filter (where steps >= 3000 and wr = 1) as act_pwk
      from sd where a <= 14 group by n) r using (n);

analyze sm (n, a_last);

-- Streak replay: validate-streaks' rules over the window's days up to settled_through, computed on
-- bit masks of those days (bit i = day ws + i, 58 bits at most) rather than day by day. The days
-- before the window, sign-up included, are misses at streak 0. The rules: a check-in adds one to
-- the streak; a miss while a streak runs uses the week's freeze if it is still unused (a new week
-- starts every Monday), else it is a first miss; a miss right after a first miss resets the streak.
-- So, C being the check-ins: the freezes (F) fall, in each week, on its first miss right after a
-- check-in (fg), or on a missed Monday right after a Sunday freeze, which then takes that week's
-- freeze (a chain from week to week: resolved one week per step, nine steps at most). A miss right
-- after a check-in or a freeze that is not a freeze is a first miss (A1); the miss right after a
-- first miss resets the streak (R). A check-in's streak_day is then its check-ins since the last R.
create function pg_temp.first_in_weeks(x bigint, sa bigint, sb bigint, ba bigint, bb bigint) returns bigint
language sql immutable as
-- The lowest set bit of x in each week. Weeks alternate between classes a and b (sa, sb: their
-- days; ba, bb: their first days): subtracting a week's first day borrows up to its lowest set
-- bit, and the first day of the next week, of the other class, stops the borrow of an empty week.
$f$ select (((x & sa) | bb) & ~(((x & sa) | bb) - ba) & sa)
         | (((x & sb) | ba) & ~(((x & sb) | ba) - bb) & sb) $f$;

-- The Mondays with a freeze chained to the previous Sunday's, one week further: a Sunday freeze
-- (sun) gives its Monday one, unless that week's own Monday had one (cm).
create function pg_temp.chain(sun bigint, cm bigint) returns bigint language sql immutable as
$f$ select (sun & ~(cm << 6)) << 1 $f$;

-- The number of bits up to the highest set one (0 for 0), for masks without two adjacent set bits
-- (their float8 value has the right exponent; exact below 2^53 anyway).
create function pg_temp.nbits(m bigint) returns int language sql immutable as
$f$ select width_bucket(m::float8, '{1,2,4,8,16,32,64,128,256,512,1024,2048,4096,8192,16384,32768,65536,131072,262144,524288,1048576,2097152,4194304,8388608,16777216,33554432,67108864,134217728,268435456,536870912,1073741824,2147483648,4294967296,8589934592,17179869184,34359738368,68719476736,137438953472,274877906944,549755813888,1099511627776,2199023255552,4398046511104,8796093022208,17592186044416,35184372088832,70368744177664,140737488355328,281474976710656,562949953421312,1125899906842624,2251799813685248,4503599627370496,9007199254740992,18014398509481984,36028797018963968,72057594037927936,144115188075855872,288230376151711744,576460752303423488,1152921504606846976,2305843009213693952,4611686018427387904}'::float8[]) $f$;

create temp table sk on commit drop as
with b as (
    select u.n, u.id, u.pfx, u.iend, u.ws - date '2000-01-03' as wsn, u.ws - u.sd as mis0, m.cmask as c,
           case when u.iend >= 0 then (2::bigint << u.iend) - 1 else 0 end as v,
           (7 - (u.ws - date '2000-01-03') % 7) % 7 as o
      from su u join sm m using (n)
    offset 0),
w as (
    -- Mondays (bits 7j after the first, o); weeks of class a: the even ones from the first Monday,
    -- class b: the odd ones and the days before the first Monday
    select b.*, 72624976668147841::bigint << o as mo,
           (9151873028817141887::bigint << o) & 9223372036854775807 as sa,
           ((71499008037633920::bigint << o) | ((1::bigint << o) - 1)) & 9223372036854775807 as sb
      from b
    offset 0),
g as (
    -- fg: each week's first miss right after a check-in
    select w.*, (mo | 1) & sa as ba, (mo | 1) & sb as bb,
           pg_temp.first_in_weeks(~c & v & (c << 1), sa, sb, (mo | 1) & sa, (mo | 1) & sb) as fg
      from w offset 0),
s as (
    -- Sundays that would be freezes and are followed by a missed Monday
    select g.*, fg & ((mo & v & ~c) >> 1) as sun from g offset 0),
ch as (
    select s.*,
           pg_temp.chain(sun, pg_temp.chain(sun, pg_temp.chain(sun, pg_temp.chain(sun, pg_temp.chain(sun,
             pg_temp.chain(sun, pg_temp.chain(sun, pg_temp.chain(sun, pg_temp.chain(sun, 0))))))))) as cmon
      from s offset 0),
f as (
    select ch.*,
           cmon | (fg & ~(cmon | (cmon << 1) | (cmon << 2) | (cmon << 3) | (cmon << 4) | (cmon << 5) | (cmon << 6))) as fz
      from ch offset 0),
r as (
    select f.*, ((((c | fz) << 1) & v & ~c & ~fz) << 1) & v & ~c as rz, pg_temp.hibit(c) as l
      from f offset 0)
select n, id, pfx || '0001-' as tpfx, c as cm, rz as zm, iend, wsn,
       case when c = 0 or (rz >> (l + 1)) <> 0 then 0
            else bit_count((c & ~((1::bigint << pg_temp.nbits(rz)) - 1))::bit(64))::int end as cur,
       case when c = 0 then (case when iend >= 0 then mis0 + iend + 1 else 0 end)
            else iend - l - bit_count((fz >> (l + 1))::bit(64))::int end as mis,
       c <> 0 and (fz >> greatest(0, iend - (wsn + iend) % 7)) <> 0 as frz,
       case when iend >= 0 then (wsn + iend) - (wsn + iend) % 7 end as wk,
       case when c <> 0 then wsn + l end as lci
  from r;
analyze sk;

-- Each check-in's streak: the check-ins since the last reset before it.
create function pg_temp.streak(cm bigint, zm bigint, i int) returns int language sql immutable as
$f$ select bit_count((cm & ((2::bigint << i) - 1)
                      & ~((1::bigint << pg_temp.nbits(zm & ((1::bigint << i) - 1))) - 1))::bit(64))::int $f$;

-- Coaches and users ------------------------------------------------------------------------------

insert into coach_personas (id, name, locale, created_at)
select md5(({{seed}})::text || ':coach_personas:' || i)::uuid, name, loc,
       {{now}} - interval '730 days' + i * interval '1 hour'
  from (values (1, 'Coach Max', 'en'), (2, 'Dr. Luna', 'en'), (3, 'Mama Rosa', 'fr')) v(i, name, loc);

insert into users (id, timezone, locale, display_name, email, phone_number, created_at, last_active_at,
                   coach_persona_id, fcm_token, push_enabled, notification_pref, notification_lead_min)
select u.id, u.tz, u.locale,
       case when pg_temp.r(u.n, 30) < 0.03 then null
            else (case when u.locale = 'fr'
                       then (array['Camille', 'Léa', 'Manon', 'Chloé', 'Inès', 'Jade', 'Louise', 'Lucas',
                                   'Hugo', 'Louis', 'Gabriel', 'Arthur', 'Jules', 'Raphaël', 'Théo',
                                   'Nathan', 'Élodie', 'Margaux', 'Sarah', 'Thomas', 'Julien', 'Amélie',
                                   'Baptiste', 'Clément', 'Océane'])[1 + floor(pg_temp.r(u.n, 31) * 25)::int]
                       else (array['James', 'Olivia', 'Liam', 'Emma', 'Noah', 'Ava', 'Sophia', 'Mason',
                                   'Mia', 'Ethan', 'Isabella', 'Lucas', 'Amelia', 'Aiden', 'Harper',
                                   'Jackson', 'Evelyn', 'Logan', 'Abigail', 'Elijah', 'Priya', 'Arjun',
                                   'Wei', 'Yuki', 'Kenji', 'Aisha', 'Tunde', 'Chloe', 'Daniel', 'Grace',
                                   'Sam', 'Zoe', 'Maya', 'Leo', 'Nora', 'Omar', 'Fatima', 'Diego',
                                   'Sofia', 'Mateo'])[1 + floor(pg_temp.r(u.n, 31) * 40)::int] end)
                 || case when pg_temp.r(u.n, 32) < 0.6
                         then ' ' || substr('ABCDEFGHJKLMNOPRSTVW', 1 + floor(pg_temp.r(u.n, 33) * 20)::int, 1) || '.'
                         else '' end end,
       'user' || u.n || '@example.test',
       u.phone,
       u.created_at,
       case when m.a_last is null
            then least({{now}}, u.created_at + pg_temp.r(u.n, 34) * interval '30 minutes')
            else greatest(u.created_at,
                          least({{now}} - pg_temp.r(u.n, 34) * interval '20 minutes',
                                ((u.today - m.a_last) + time '20:30' + pg_temp.r(u.n, 35) * interval '150 minutes')
                                  at time zone u.tzn)) end,
       md5(({{seed}})::text || ':coach_personas:' || u.persona)::uuid,
       case when u.legacy then pg_temp.tok(u.n, case when pg_temp.r(u.n, 36) < 0.6 and u.ntok >= 1 then 1 else 9 end,
                                           case when pg_temp.r(u.n, 36) < 0.6 and u.ntok >= 1 then u.plat1 else 'android' end) end,
       u.push_enabled, u.npref, u.lead
  from su u join sm m using (n);


-- The tracking rows; their streaks give each user's longest streak and the days the badges were
-- earned (the first day a streak reached 7, 30, 100).
create temp table sl (user_id uuid, lng int, d7 date, d30 date, d100 date) on commit drop;
set local jit = on;
with t as (
    insert into daily_tracking (id, user_id, date, steps, weight, mood, energy, checked_in_at,
                                previous_day_sentiment, previous_day_steps, streak_day,
                                submitted_to_fitcircles, submission_timestamp, created_at, updated_at)
    -- (the id is pg_temp.cid(pfx, 1, day) with its per-user part built once)
    select (k.tpfx || lpad(to_hex(d.d - date '2000-01-01'), 12, '0'))::uuid, k.id, d.d, d.steps, d.weight, d.mood, d.energy, d.cit,
           d.pds, d.pdsteps, case when d.cs then pg_temp.streak(k.cm, k.zm, d.i) end,
           d.sub, case when d.sub then least(d.sut, {{now}}) end, d.cat, d.uat
      from sd d join sk k using (n)
    returning user_id, date, streak_day)
insert into sl
select user_id, max(streak_day), min(date) filter (where streak_day = 7), min(date) filter (where streak_day = 30),
       min(date) filter (where streak_day = 100)
  from t where streak_day is not null group by user_id;
set local jit = off;

insert into user_streaks (id, user_id, current_streak, longest_streak, last_checkin_date,
                          freeze_used_this_week, week_start_date, created_at, updated_at,
                          settled_through, missed_days)
select pg_temp.cid(u.pfx, 2, 0), u.id, k.cur, coalesce(l.lng, 0), date '2000-01-03' + k.lci, k.frz,
       date '2000-01-03' + k.wk, u.created_at,
       case when u.st >= u.sd
            then greatest(u.created_at, least({{now}}, ((u.st + 1) + time '00:05') at time zone u.tzn))
            else u.created_at end,
       u.st, k.mis
  from su u join sk k using (n) left join sl l on l.user_id = u.id;

insert into user_badges (user_id, badge, earned_at)
select u.id, b.badge, least({{now}}, ((b.d + 1) + time '00:05') at time zone u.tzn)
  from su u join sl l on l.user_id = u.id
 cross join lateral (values (1, 'week_warrior', l.d7), (2, 'monthly_master', l.d30), (3, 'centurion', l.d100)) b(o, badge, d)
 where b.d is not null;

-- Goals of the recent days and weeks ---------------------------------------------------------------

-- Yesterday's goals (closed) and today's (open; not yet generated for a few users).
insert into daily_goals (id, user_id, date, goal_type, target_value, actual_value, completed, created_at)
select pg_temp.cid(g.pfx, 3, (g.day - date '2000-01-01') * 8 + g.t), g.id, g.day, g.goal_type,
       g.target, g.actual, coalesce(g.actual >= g.target, false) and g.goal_type <> 'weight'
                           or (g.goal_type = 'weight' and coalesce(g.actual <= g.target, false)),
       greatest(g.created_at + interval '1 minute',
                least({{now}}, (g.day + time '00:05' + pg_temp.r(g.n::bigint * 4 + g.a, 310) * interval '50 minutes') at time zone g.tzn))
  from (
    select v.n, v.pfx, v.id, v.created_at, v.tzn, v.a, v.today - v.a as day, v.t, v.goal_type,
           case v.goal_type
                when 'steps' then (case when v.today - v.a - v.sd < 7 or (case v.a when 0 then v.avg_0 else v.avg_1 end) is null
                                        then (case when v.act = 1 then 5000 else 7000 end)
                                        else least(15000, round((case v.a when 0 then v.avg_0 else v.avg_1 end) * 1.1 / 100) * 100) end)
                when 'checkin' then 1
                else -0.2 end::numeric as target,
           case v.goal_type
                when 'steps' then coalesce(case v.a when 0 then v.s_a0 else v.s_a1 end, 0)
                when 'checkin' then (case when (case v.a when 0 then v.ci_a0 else v.ci_a1 end) then 1 else 0 end)
                else (case v.a when 0 then v.w_a0 - v.w_a1 else v.w_a1 - v.w_a2 end) end::numeric as actual
      from (
        -- yesterday's goals, then today's: a = days before today, t = the goal
        select w.*, 1 - w.k / 3 as a, w.k % 3 + 1 as t, (array['steps', 'checkin', 'weight'])[w.k % 3 + 1] as goal_type
          from (select u.n, u.pfx, u.id, u.created_at, u.tzn, u.today, u.sd, u.ltm, u.act, u.wc_id, u.wlogger,
                       c.avg_0, c.avg_1, c.s_a0, c.s_a1, c.ci_a0, c.ci_a1, c.w_a0, c.w_a1, c.w_a2,
                       generate_series(0, 5) as k
                  from su u join sm c using (n)) w) v
     where v.today - v.a >= v.sd
       and (v.a = 1 or (v.ltm >= 60 and pg_temp.r(v.n, 311) < 0.9))
       and (v.goal_type <> 'weight' or (v.wc_id is not null and v.wlogger and v.today - v.a - v.sd >= 7))
    offset 0) g;

-- This week's goals and last week's, for the users active in the last two weeks.
insert into weekly_goals (id, user_id, week_start, goal_type, target_value, actual_value,
                          daily_breakdown, completed, fitcircle_id, created_at)
select pg_temp.cid(g.pfx, 4, (g.wk - date '2000-01-03') * 8 + g.t), g.id, g.wk, g.goal_type,
       g.target, g.actual, g.breakdown, coalesce(g.actual >= g.target, false), g.fc,
       greatest(g.created_at + interval '1 minute',
                least({{now}}, (g.wk + time '00:10' + pg_temp.r(g.n::bigint * 4 + g.t, 312) * interval '40 minutes') at time zone g.tzn))
  from (
    select v.n, v.pfx, v.id, v.created_at, v.tzn, v.wk, v.t, v.goal_type,
           case v.goal_type
                when 'steps' then coalesce(v.sc_goal, case when v.isnew then 50000
                                                          else least(105000, round(v.base * 7.7 / 1000) * 1000) end)
                when 'streak' then 7
                when 'active_days' then 5
                else 1.0 end::numeric as target,
           case v.goal_type
                when 'steps' then (case when v.cur then v.s_wk else v.s_pwk end)
                when 'streak' then (case when v.cur then v.c_wk else v.c_pwk end)
                when 'active_days' then (case when v.cur then v.act_wk else v.act_pwk end)
                else null end::numeric as actual,
           case when v.goal_type = 'steps' then (case when v.cur then v.j_wk else v.j_pwk end) else '{}'::jsonb end as breakdown,
           case v.goal_type when 'steps' then v.sc_id when 'weight' then v.wc_id end as fc
      from (
        -- last week's goals, then this week's (cur); t = the goal
        select w.*, w.k >= 4 as cur, w.mon_t - (case when w.k >= 4 then 0 else 7 end) as wk, w.k % 4 + 1 as t,
               (array['steps', 'streak', 'active_days', 'weight'])[w.k % 4 + 1] as goal_type
          from (select u.n, u.pfx, u.id, u.created_at, u.tzn, u.mon_t, u.sd, u.isnew, u.base, u.sc_goal, u.sc_id, u.wc_id,
                       c.s_wk, c.s_pwk, c.c_wk, c.c_pwk, c.act_wk, c.act_pwk, c.j_wk, c.j_pwk,
                       generate_series(0, 7) as k
                  from su u join sm c using (n)
                 where c.a_last <= 13) w) v
     where v.wk >= v.sd
       and (v.goal_type <> 'weight' or v.wc_id is not null)
    offset 0) g;

-- FitCircles, members, submissions, leaderboards -----------------------------------------------------

insert into fitcircles (id, name, challenge_type, timezone, starts_on, ends_on, challenge_step_goal, created_at)
select id, name, ctype, tz, starts_on, ends_on, goal, created_at from fc;

insert into fitcircle_members (fitcircle_id, user_id, joined_at, left_at, starting_weight, target_weight)
select fitcircle_id, user_id, joined_at, left_at, starting_weight, target_weight
  from fm;

insert into fitcircle_data_submissions (id, fitcircle_id, user_id, submission_date, steps, weight,
                                        submitted_at, rank_after_submission, rank_change)
select id, fitcircle_id, user_id, d, steps, weight, sat, rk,
       lag(rk) over (partition by fitcircle_id, user_id order by d) - rk
  from (
    select pg_temp.cid(u.pfx, 5, f.c::bigint * 4096 + (x.d - date '2000-01-01')) as id,
           f.fitcircle_id, u.id as user_id, x.d, x.steps, x.weight, least(x.sut, {{now}}) as sat,
           row_number() over (partition by f.fitcircle_id, x.d
                              order by case when f.ctype = 'steps' then x.steps::numeric
                                            else f.starting_weight - coalesce(x.weight, f.starting_weight) end desc nulls last,
                                       x.sut, u.id) as rk
      from sd x
      join su u using (n)
      join fm f on f.n = u.n
                and x.d between greatest(f.starts_on, (f.joined_at at time zone u.tzn)::date)
                            and least(f.ends_on, coalesce((f.left_at at time zone u.tzn)::date - 1, u.today))
     where x.sub) s;

insert into fitcircle_leaderboard_entries (id, fitcircle_id, user_id, period, period_start, metric_type,
                                           metric_value, rank, rank_change, last_updated)
with mem as (
    select f.c, f.fitcircle_id, f.user_id, f.n, f.ctype, f.ct, f.starts_on, f.starting_weight, f.target_weight,
           greatest(f.starts_on, (f.joined_at at time zone f.tzn)::date) as lo_d, f.w0, f.trend, u.wlogger, u.pfx
      from fm f join su u using (n)
     where f.left_at is null and f.starts_on <= f.ct and pg_temp.r(f.c, 120) < 0.5),
st as (
    select m.fitcircle_id, m.user_id,
           sum(t.steps) filter (where t.d = m.ct) as s_day,
           sum(t.steps) filter (where t.d >= pg_temp.mon(m.ct)) as s_week,
           sum(t.steps) filter (where t.d >= date_trunc('month', m.ct)::date) as s_month,
           sum(t.steps) as s_all,
           max(t.uat) as ach
      from mem m join sd t on t.n = m.n and t.d >= m.lo_d and t.d <= m.ct
     where m.ctype = 'steps'
     group by 1, 2),
v as (
    select m.*, p.period, p.o,
           case p.period when 'daily' then m.ct when 'weekly' then pg_temp.mon(m.ct)
                         when 'monthly' then date_trunc('month', m.ct)::date else m.starts_on end as period_start,
           -- A member without a value (no steps, never weighed in) holds no place (leaderboard-refresh).
           case when m.ctype = 'steps'
                then nullif(case p.period when 'daily' then st.s_day when 'weekly' then st.s_week
                                          when 'monthly' then st.s_month else st.s_all end, 0)
                when not m.wlogger or m.starting_weight is null then null
                when p.period in ('monthly', 'all_time')
                     then round(greatest(0, m.starting_weight - (m.w0 + m.trend * 59)::numeric)
                                * (case when p.period = 'monthly' then 0.5 else 1 end), 1)
                else round(100 * greatest(0, m.starting_weight - (m.w0 + m.trend * 59)::numeric)
                           / nullif(m.starting_weight - m.target_weight, 0), 1) end as metric,
           coalesce(st.ach, {{now}} - interval '1 day') as ach
      from mem m left join st using (fitcircle_id, user_id)
     cross join (values (1, 'daily'), (2, 'weekly'), (3, 'monthly'), (4, 'all_time')) p(o, period)),
rk as (
    select v.*,
           case when metric is not null
                then row_number() over (partition by fitcircle_id, period order by metric desc nulls last, ach, user_id) end as rnk,
           count(metric) over (partition by fitcircle_id, period) as cnt
      from v)
select pg_temp.cid(pfx, 6, c::bigint * 8 + o), fitcircle_id, user_id, period, period_start,
       case when ctype = 'steps' then 'steps' else 'weight_loss_pct' end, metric, rnk,
       case when period <> 'all_time' and rnk is not null
            then least(cnt, greatest(1, rnk + round(1.5 * pg_temp.tri(n::bigint * 4096 + c * 8 + o, 121))::int)) - rnk end,
       {{now}} - pg_temp.r(n::bigint * 4096 + c * 8 + o, 123) * interval '5 minutes'
  from rk;

-- Devices and notification settings ----------------------------------------------------------------

-- Per-user facts the remaining tables share.
create temp table sx on commit drop as
select u.n, u.id, u.pfx, u.tz, u.tzn, u.locale, u.persona, u.created_at, u.today, u.ltm, u.e, u.isnew,
       u.ntok, u.plat1, u.plat2, u.push_enabled, u.npref, u.phone, u.lead, u.legacy, u.habit,
       us.last_active_at, m.a_last,
       (array['Coach Max', 'Dr. Luna', 'Mama Rosa'])[u.persona] as coach,
       pg_temp.r(u.n, 70) < 0.9 as has_cp,
       pg_temp.r(u.n, 71) < 0.7 as check_ins,
       case when pg_temp.r(u.n, 72) < 0.35 then 'daily' when pg_temp.r(u.n, 72) < 0.8 then 'few_times_a_week' else 'weekly' end as freq,
       case when u.e = 4 and u.ca > 30 then 0
            else (case when pg_temp.r(u.n, 73) < 0.35 then 0 when pg_temp.r(u.n, 73) < 0.6 then 1
                       when pg_temp.r(u.n, 73) < 0.78 then 2 when pg_temp.r(u.n, 73) < 0.89 then 3
                       when pg_temp.r(u.n, 73) < 0.95 then 4 when pg_temp.r(u.n, 73) < 0.98 then 5 else 6 end) end as nconv,
       pg_temp.r(u.n, 74) < 0.3 as calls,
       pg_temp.r(u.n, 75) < 0.88 as e_digest,
       pg_temp.r(u.n, 76) < 0.8 as e_monthly,
       pg_temp.r(u.n, 77) < 0.9 as e_streak,
       pg_temp.r(u.n, 78) < 0.93 as e_checkin
  from su u join sm m using (n) join users us on us.id = u.id
 order by u.id;
analyze sx (n, id);

insert into user_push_tokens (id, user_id, device_token, platform, active, last_used, created_at)
select pg_temp.cid(x.pfx, 7, t.j), x.id, pg_temp.tok(x.n, t.j, t.platform), t.platform,
       not (t.stale and pg_temp.r(x.n::bigint * 8 + t.j, 303) < 0.5),
       case when t.stale then least(x.last_active_at, t.created + (x.last_active_at - t.created) * 0.2)
            else greatest(t.created, x.last_active_at - pg_temp.r(x.n::bigint * 8 + t.j, 304) * interval '36 hours') end,
       t.created
  from sx x
 cross join lateral (
    select j, case when j = 1 then x.plat1 else x.plat2 end as platform,
           pg_temp.r(x.n::bigint * 8 + j, 301) < 0.1 as stale,
           x.created_at + (x.last_active_at - x.created_at) * (case when j = 1 then 0.02 else 0.5 end)
                        * pg_temp.r(x.n::bigint * 8 + j, 302) as created
      from generate_series(1, x.ntok) j) t
;

-- About 40% of users changed something; the others have no row (the defaults).
insert into notification_preferences (id, user_id, push_enabled, email_enabled, inapp_enabled,
    push_daily_checkin, push_streak_risk, push_weekly_goal, push_data_submission, push_leaderboard_change,
    push_social_engagement, push_weekly_digest, push_challenge_milestone,
    email_daily_checkin, email_streak_risk, email_weekly_digest, email_monthly_report,
    email_fitcircle_invite, email_challenge_milestone, daily_reminder_time, dnd_start, dnd_end,
    pause_weekends, updated_at)
select pg_temp.cid(x.pfx, 8, 0), x.id,
       pg_temp.r(x.n, 350) < 0.95, pg_temp.r(x.n, 351) < 0.9, pg_temp.r(x.n, 352) < 0.97,
       true, pg_temp.r(x.n, 353) < 0.85, pg_temp.r(x.n, 354) < 0.8, pg_temp.r(x.n, 355) < 0.85,
       pg_temp.r(x.n, 356) < 0.7, pg_temp.r(x.n, 357) < 0.75, pg_temp.r(x.n, 358) < 0.85, true,
       x.e_checkin, x.e_streak, x.e_digest, x.e_monthly, true, true,
       case when pg_temp.r(x.n, 359) < 0.25 then time '06:00' + floor(pg_temp.r(x.n, 360) * 13) * interval '15 minutes'
            when pg_temp.r(x.n, 359) < 0.9 then time '18:00' + floor(pg_temp.r(x.n, 360) * 15) * interval '15 minutes'
            else time '12:00' + floor(pg_temp.r(x.n, 360) * 45) * interval '15 minutes' end,
       (array[time '22:00', time '22:00', time '22:00', time '22:00', time '22:00', time '22:00', time '22:00',
              time '23:00', time '21:00', time '00:00', time '22:30'])[1 + floor(pg_temp.r(x.n, 361) * 11)::int],
       (array[time '08:00', time '08:00', time '08:00', time '08:00', time '08:00', time '08:00', time '08:00',
              time '07:00', time '06:30', time '09:00', time '07:30'])[1 + floor(pg_temp.r(x.n, 361) * 11)::int],
       pg_temp.r(x.n, 362) < 0.1,
       x.created_at + ({{now}} - x.created_at) * pg_temp.r(x.n, 363)
  from sx x
 where pg_temp.r(x.n, 364) < 0.4;

insert into email_preferences (id, user_id, daily_checkin_reminder, streak_at_risk, weekly_digest,
                               monthly_report, fitcircle_invites, challenge_milestones,
                               unsubscribe_token, updated_at)
select pg_temp.cid(x.pfx, 9, 0), x.id, x.e_checkin, x.e_streak, x.e_digest, x.e_monthly,
       pg_temp.r(x.n, 365) < 0.95, pg_temp.r(x.n, 366) < 0.97,
       md5(({{seed}})::text || ':unsubscribe:' || x.n) || left(md5(({{seed}})::text || ':unsubscribe2:' || x.n), 16),
       case when x.e_digest and x.e_monthly and x.e_checkin and x.e_streak then x.created_at
            else x.created_at + ({{now}} - x.created_at) * pg_temp.r(x.n, 367) end
  from sx x;

-- Emails sent: the welcome email, the last two weekly digests, this month's report, now and then a
-- streak-at-risk email or a check-in reminder (users without a device).
insert into email_logs (id, user_id, email_type, sent_at, opened, clicked, provider_id)
select pg_temp.cid(e.pfx, 10, e.j), e.id, e.email_type, e.sent_at,
       e.opened, e.opened and pg_temp.r(e.n::bigint * 16 + e.j, 372) < 0.3,
       'msg_' || left(md5(({{seed}})::text || ':email:' || e.n || ':' || e.j), 24)
  from (
    -- (a SRF in the select list, not a lateral VALUES: VALUES rebuilds its expressions for every
    -- row; the rows come out in (user, j) order, the primary key's)
    select x.n, x.pfx, x.id, x.created_at, x.j,
           (array['welcome', 'weekly_digest', 'weekly_digest', 'monthly_report', 'streak_at_risk',
                  'daily_checkin_reminder'])[x.j + 1] as email_type,
           case x.j
                when 0 then x.created_at + interval '1 minute' + pg_temp.r(x.n, 380) * interval '40 seconds'
                when 1 then ((x.today - (x.today - date '2000-01-02') % 7 - 7) + time '20:00') at time zone x.tzn
                when 2 then ((x.today - (x.today - date '2000-01-02') % 7) + time '20:00') at time zone x.tzn
                when 3 then (date_trunc('month', x.today)::date + time '09:00') at time zone x.tzn
                when 4 then ((x.today - 1 - floor(pg_temp.r(x.n, 384) * 10)::int) + time '09:00') at time zone x.tzn
                else ((x.today - 1 - floor(pg_temp.r(x.n, 386) * 5)::int) + time '21:00') at time zone x.tzn end as sent_at,
           pg_temp.r(x.n::bigint * 16 + x.j, 371) < 0.45 as opened
      from (select n, pfx, id, created_at, today, tzn, e_digest, e_monthly, e_streak, e_checkin, ntok,
                   generate_series(0, 5) as j
              from sx) x
     where case x.j
                when 0 then true
                when 1 then x.e_digest and pg_temp.r(x.n, 381) < 0.9
                when 2 then x.e_digest and pg_temp.r(x.n, 382) < 0.9
                when 3 then x.e_monthly and pg_temp.r(x.n, 383) < 0.85
                when 4 then x.e_streak and pg_temp.r(x.n, 385) < 0.15
                else x.e_checkin and x.ntok = 0 and pg_temp.r(x.n, 387) < 0.6 end
    offset 0) e
 where e.sent_at <= {{now}} and e.sent_at > e.created_at;

-- Coaching calls: past ones of the last two weeks, and the pending calls of the next hours.
create temp table sc on commit drop as
select x.n, x.id as user_id, x.pfx, x.locale, x.coach, x.npref, x.phone, x.ntok, x.lead, x.push_enabled,
       c.j, pg_temp.cid(x.pfx, 11, c.j) as id, c.scheduled_at, c.status, c.topic,
       c.status in ('completed', 'missed', 'failed', 'in_progress')
         or (c.status = 'pending' and c.scheduled_at - x.lead * interval '1 minute' <= {{now}}) as preview_sent,
       greatest(x.created_at, least({{now}} - (1 + 60 * pg_temp.r(x.n::bigint * 16 + c.j, 398)) * interval '1 minute',
                                    c.scheduled_at - (6 + 60 * pg_temp.r(x.n::bigint * 16 + c.j, 394)) * interval '1 hour')) as created_at
  from sx x
 cross join lateral (
    select j, sa as scheduled_at,
           case when j = 9 then 'pending'
                when pg_temp.r(x.n::bigint * 16 + j, 391) < 0.72 then 'completed'
                when pg_temp.r(x.n::bigint * 16 + j, 391) < 0.82 then 'missed'
                when pg_temp.r(x.n::bigint * 16 + j, 391) < 0.95 then 'cancelled' else 'failed' end as status,
           (array['fitness_checkin', 'weekly_weighin', 'mood_check', 'meal_review', 'exercise_plan',
                  'streak_celebrate'])[1 + floor(pg_temp.r(x.n::bigint * 16 + j, 392) * 6)::int] as topic
      from (
        select j, case when j = 9
                       then date_trunc('minute', {{now}} + (2 + 718 * power(pg_temp.r(x.n, 393), 2)) * interval '1 minute')
                       else ((x.today - 1 - floor(pg_temp.r(x.n::bigint * 16 + j, 390) * 14)::int)
                             + time '07:00' + floor(pg_temp.r(x.n::bigint * 16 + j, 395) * 56) * interval '15 minutes')
                            at time zone x.tzn end as sa
          from generate_series(1, 9) j
         where (j <= floor(pg_temp.r(x.n, 396) * 5) and x.calls)
            or (j = 9 and pg_temp.r(x.n, 397) < 0.06)) s
     where sa > x.created_at) c
 where c.j = 9 or c.scheduled_at < {{now}} - interval '1 hour';

-- (preview_due_at written here: the load runs without triggers.)
insert into scheduled_calls (id, user_id, scheduled_at, status, topic, preview_sent, preview_sent_at, preview_for,
                             preview_due_at, created_at, updated_at)
select id, user_id, scheduled_at, status, topic, preview_sent,
       case when preview_sent then scheduled_at - lead * interval '1 minute' end,
       case when preview_sent then scheduled_at end,
       scheduled_at - lead * interval '1 minute',
       created_at,
       case status when 'pending' then created_at
                   when 'cancelled' then created_at + (scheduled_at - created_at) * 0.5
                   else scheduled_at + (case when status = 'completed' then 12 else 2 end) * interval '1 minute' end
  from sc;

-- Every delivery attempt: the previews of the calls (seed 000) and the engagement notifications
-- of the last two weeks (seed 003).
insert into notification_logs (id, user_id, call_id, type, notification_type, channel, status, title, body,
                               payload, provider_id, error_msg, sent_at, delivered, delivered_at,
                               opened, opened_at, created_at)
select pg_temp.cid(pfx, 12, j), user_id, call_id, type, ntype, channel, status, title, body, payload,
       case when sent_at is not null then (case when channel = 'sms' then 'SM' else 'fcm-' end)
                                          || left(md5(({{seed}})::text || ':notif:' || n || ':' || j), 30) end,
       case when status = 'failed' then (case when channel = 'sms' then 'Twilio 30003: Unreachable destination handset'
                                              else 'UNREGISTERED: the registration token is not valid' end) end,
       sent_at, status in ('delivered', 'opened'),
       case when status in ('delivered', 'opened') then sent_at + interval '2 seconds' end,
       status = 'opened',
       case when status = 'opened' then least({{now}}, sent_at + (1 + 60 * pg_temp.r(n::bigint * 64 + j, 409)) * interval '1 minute') end,
       created_at
  from (
    -- previews of the past calls and of the imminent ones
    select c.n, c.pfx, c.user_id, c.id as call_id, c.j * 2 + c.k as j,
           c.type, null::text as ntype, c.channel,
           case when c.status = 'failed' and c.k = 0 then 'failed'
                when c.channel = 'sms' then 'delivered'
                when pg_temp.r(c.n::bigint * 16 + c.j, 400) < 0.55 then 'opened' else 'delivered' end as status,
           case when c.channel = 'push' then c.coach || (case when c.locale = 'fr' then ' t''appelle dans ' else ' is calling in ' end)
                                             || c.lead || ' min' end as title,
           case when c.locale = 'fr'
                then (case when c.channel = 'sms' then 'Coach ' || c.coach || ' t''appelle dans ' || c.lead || ' min ! Décroche !'
                           else 'Point du jour : ' || c.topic end)
                else (case when c.channel = 'sms' then 'Coach ' || c.coach || ' calling in ' || c.lead || ' min! Answer!'
                           else 'Today''s topic: ' || c.topic end) end as body,
           jsonb_build_object('call_id', c.id, 'topic', c.topic, 'kind', 'call_preview') as payload,
           c.scheduled_at - c.lead * interval '1 minute' + c.k * interval '30 seconds' as sent_at,
           c.scheduled_at - c.lead * interval '1 minute' as created_at
      from (
        -- the preview (k = 0), and the fallback SMS when a call failed (k = 1)
        select c.*,
               case when c.k = 1 then 'fallback_sms'
                    when c.npref = 'sms_only' or c.ntok = 0 or not c.push_enabled then 'preview_sms' else 'preview_push' end as type,
               case when c.k = 1 or c.npref = 'sms_only' or c.ntok = 0 or not c.push_enabled then 'sms' else 'push' end as channel
          from (select sc.*, generate_series(0, 1) as k from sc) c) c
     where c.preview_sent and c.scheduled_at - c.lead * interval '1 minute' <= {{now}} - interval '1 minute'
       and (c.npref <> 'push_only' or c.ntok > 0 or c.phone is not null)
       and (c.k = 0 or (c.status = 'failed' and c.phone is not null and c.npref <> 'push_only'))
       and (c.k = 1 or c.npref <> 'sms_only' or c.phone is not null)
    union all
    -- engagement notifications
    select v.n, v.pfx, v.id, null, 100 + v.j, null, v.ntype,
           case when v.ntok = 0 then 'inapp' else 'push' end,
           v.status,
           case v.ntype when 'daily_checkin' then (case when v.locale = 'fr' then 'Ton check-in du jour' else 'Daily check-in' end)
                        when 'streak_risk' then (case when v.locale = 'fr' then 'Ta série est en jeu' else 'Your streak is at risk' end)
                        when 'weekly_goal' then (case when v.locale = 'fr' then 'Objectif de la semaine' else 'Weekly goal progress' end)
                        when 'data_submission' then (case when v.locale = 'fr' then 'Envoie tes pas' else 'Submit your steps' end)
                        when 'leaderboard_change' then (case when v.locale = 'fr' then 'Classement' else 'Leaderboard update' end)
                        else (case when v.locale = 'fr' then 'Ta semaine' else 'Your week in review' end) end,
           case v.ntype when 'daily_checkin' then (case when v.locale = 'fr' then 'Fais ton check-in pour garder ta série !' else 'Complete your check-in to keep your streak alive!' end)
                        when 'streak_risk' then (case when v.locale = 'fr' then 'Tu as manqué hier. Ne rate pas deux jours de suite !' else 'You missed yesterday. Never miss twice!' end)
                        when 'weekly_goal' then (case when v.locale = 'fr' then 'Tu es à mi-semaine, encore un effort !' else 'You''re halfway through the week. You''ve got this!' end)
                        when 'data_submission' then (case when v.locale = 'fr' then 'Envoie tes pas du jour à ton FitCircle avant minuit !' else 'Submit today''s steps to your FitCircles before midnight!' end)
                        when 'leaderboard_change' then (case when v.locale = 'fr' then 'Tu as gagné des places dans ton FitCircle !' else 'You moved up in your FitCircle!' end)
                        else (case when v.locale = 'fr' then 'Ton résumé de la semaine est prêt.' else 'Your weekly summary is ready.' end) end,
           jsonb_build_object('type', v.ntype, 'deep_link', 'fitcircle://' || replace(v.ntype, '_', '-')),
           case when v.status in ('suppressed', 'deferred', 'queued') then null else v.at end,
           v.at
      from (
        select v.*,
               case when v.r2 < 0.25 then 'opened'
                    when v.r2 < 0.78 then 'delivered'
                    when v.r2 < 0.86 then 'sent'
                    when v.r2 < 0.92 then (case when v.ntok = 0 then 'delivered' else 'failed' end)
                    when v.r2 < 0.98 then 'suppressed' else 'deferred' end as status
          from (
            select x.*,
                   (array['daily_checkin', 'streak_risk', 'weekly_goal', 'daily_checkin', 'data_submission',
                          'leaderboard_change', 'weekly_digest', 'daily_checkin'])[x.j] as ntype,
                   ((x.today - 1 - floor(pg_temp.r(x.n::bigint * 64 + 100 + x.j, 401) * 13)::int)
                     + (array[time '20:00', time '09:00', time '18:00', time '20:00', time '20:00',
                              time '13:17', time '20:00', time '20:00'])[x.j]) at time zone x.tzn as at,
                   pg_temp.r(x.n::bigint * 64 + 100 + x.j, 402) as r2
              from (select n, pfx, id, ntok, locale, today, tzn, e, a_last, created_at, generate_series(1, 8) as j
                      from sx) x
             where pg_temp.r(x.n::bigint * 64 + 100 + x.j, 400) < (case when x.e = 4 and x.a_last is null then 0.03 else 0.22 end)
            offset 0) v
         where v.at > v.created_at and v.at <= {{now}}) v
  ) t;

-- The coach: profiles, conversations, signals, patterns, proactive pushes ---------------------------

-- A coaching domain's style: four preferences between 0 and 1.
create function pg_temp.styles(k bigint) returns jsonb language sql stable as
$f$ select jsonb_build_object('direct_vs_exploratory', pg_temp.dec2(pg_temp.r(k, 431)),
                              'brief_vs_detailed', pg_temp.dec2(pg_temp.r(k, 432)),
                              'action_vs_reflective', pg_temp.dec2(pg_temp.r(k, 433)),
                              'challenging_vs_supportive', pg_temp.dec2(pg_temp.r(k, 434))) $f$;

insert into context_profiles (user_id, timezone, notification_preferences, coaching_preferences, domain_styles,
                              created_at, updated_at)
select x.id, x.tz,
       jsonb_build_object('check_ins_enabled', x.check_ins, 'frequency', x.freq),
       jsonb_build_object(
           'preferred_style', (array['direct', 'exploratory', 'supportive', 'challenging', 'balanced'])[1 + floor(pg_temp.r(x.n, 420) * 5)::int],
           'domain_usage', jsonb_build_object('fitness', floor(pg_temp.r(x.n, 421) * 20)::int,
                                              'nutrition', floor(pg_temp.r(x.n, 422) * 9)::int,
                                              'stress', floor(pg_temp.r(x.n, 423) * 8)::int,
                                              'career', floor(pg_temp.r(x.n, 424) * 7)::int),
           'session_patterns', jsonb_build_object(
               'preferred_time', case when x.habit < 720 then 'morning' when x.habit < 1080 then 'afternoon' else 'evening' end,
               'avg_session_minutes', 4 + floor(pg_temp.r(x.n, 425) * 22)::int,
               'sessions_per_week', pg_temp.dec1(0.5 + 4.5 * pg_temp.r(x.n, 426))),
           'last_reflection_at', case when pg_temp.r(x.n, 427) < 0.6
                                      then to_char(greatest(x.created_at, {{now}} - pg_temp.r(x.n, 428) * interval '21 days') at time zone 'UTC',
                                                   'YYYY-MM-DD"T"HH24:MI:SS"Z"') end),
       -- the styles of the coaching domains the user has used (mostly fitness, the others now and then)
       jsonb_strip_nulls(jsonb_build_object(
           'fitness', case when pg_temp.r(x.n::bigint * 8 + 1, 430) < 0.8 then pg_temp.styles(x.n::bigint * 8 + 1) end,
           'stress', case when pg_temp.r(x.n::bigint * 8 + 2, 430) < 0.3 then pg_temp.styles(x.n::bigint * 8 + 2) end,
           'career', case when pg_temp.r(x.n::bigint * 8 + 3, 430) < 0.3 then pg_temp.styles(x.n::bigint * 8 + 3) end,
           'nutrition', case when pg_temp.r(x.n::bigint * 8 + 4, 430) < 0.3 then pg_temp.styles(x.n::bigint * 8 + 4) end)),
       x.created_at + interval '2 minutes',
       x.created_at + interval '2 minutes' + ({{now}} - x.created_at - interval '2 minutes') * pg_temp.r(x.n, 429)
  from sx x
 where x.has_cp;

-- Conversations of the last 30 days (the users' local daytime), 2 to 8 messages each.
create temp table cv on commit drop as
select x.n, x.id as user_id, x.pfx, x.locale, x.tzn, x.persona, c.j,
       pg_temp.cid(x.pfx, 13, c.j) as id, c.dom, c.start, c.msgs, c.age
  from sx x
 cross join lateral (
    select j, dom, age, msgs,
           -- a conversation that would not have ended by now took place the day before
           case when s0 > {{now}} - (msgs * 3 + 5) * interval '1 minute' then s0 - interval '1 day' else s0 end as start
      from (
        select j,
               (array['fitness', 'stress', 'career', 'sleep', 'nutrition', 'relationships', 'fitness', 'stress'])
                 [1 + floor(pg_temp.r(x.n::bigint * 8 + j, 440) * 8)::int] as dom,
               floor(power(pg_temp.r(x.n::bigint * 8 + j, 441), 1.3) * 30)::int as age,
               2 + floor(pg_temp.r(x.n::bigint * 8 + j, 443) * 7)::int as msgs
          from generate_series(1, x.nconv) j) s
     cross join lateral (
        select ((x.today - age) + time '07:30' + pg_temp.r(x.n::bigint * 8 + j, 442) * interval '14 hours')
               at time zone x.tzn as s0) t) c
 where c.start > x.created_at;

insert into conversations (id, user_id, domain, title, created_at, updated_at)
select id, user_id, dom,
       case when locale = 'fr'
            then (case dom when 'fitness' then 'Reprendre le sport' when 'stress' then 'Gérer la pression'
                           when 'career' then 'Préparer la suite au travail' when 'sleep' then 'Mieux dormir'
                           when 'nutrition' then 'Manger plus équilibré' else 'Du temps pour les proches' end)
            else (case dom when 'fitness' then (array['Getting back into running', 'Morning workout plan', 'Hitting my step goal'])[1 + j % 3]
                           when 'stress' then (array['Handling a stressful week', 'Work stress', 'Feeling overwhelmed'])[1 + j % 3]
                           when 'career' then (array['Preparing for the big presentation', 'Interview prep', 'Talking to my manager'])[1 + j % 3]
                           when 'sleep' then 'Sleeping better'
                           when 'nutrition' then (array['Evening snacking', 'Meal prep for the week'])[1 + j % 2]
                           else 'Making time for family' end) end,
       start, start + (msgs - 1) * 3 * interval '1 minute' + interval '40 seconds'
  from cv;

-- Messages: the user speaks first; in the last week some mention an upcoming event.
insert into messages (id, conversation_id, user_id, role, content, created_at)
select pg_temp.cid(c.pfx, 14, c.j * 16 + m), c.id, c.user_id,
       case when m % 2 = 0 then 'user' else 'assistant' end,
       case when m % 2 = 1 then
            (case when c.locale = 'fr'
                  then (array['Je t''entends. Qu''est-ce qui t''aiderait le plus aujourd''hui ?',
                              'C''est déjà un beau pas. On fixe un petit objectif pour demain ?',
                              'Prends une minute pour respirer. Qu''est-ce qui compte vraiment là ?',
                              'Bravo pour ta régularité ! Comment te sens-tu ?'])
                       [1 + floor(pg_temp.r(c.n::bigint * 128 + c.j * 16 + m, 452) * 4)::int]
                  else (array['That sounds like a lot to carry. What would make tomorrow feel a bit lighter?',
                              'Nice work showing up today. What is one small step you can take next?',
                              'Let''s break that down. Which part feels most within your control?',
                              'You''ve been consistent lately. How is your energy holding up?',
                              'What usually helps you reset when a week gets like this?'])
                       [1 + floor(pg_temp.r(c.n::bigint * 128 + c.j * 16 + m, 452) * 5)::int] end)
            when m = 0 and c.age <= 6 and pg_temp.r(c.n::bigint * 128 + c.j * 16, 450) < 0.5 then
            -- temporal references, relative to the day of the message
            (case when c.locale = 'fr'
                  then (array['J''ai une présentation demain et je stresse un peu.',
                              'Mon entretien est ce ' || (array['lundi', 'mardi', 'mercredi', 'jeudi', 'vendredi', 'samedi', 'dimanche'])
                                   [1 + ((md.d + 2 - date '2000-01-03') % 7)] || ', je veux être prêt.',
                              'Grosse deadline le ' || extract(day from md.d + 4)::int || ' '
                                   || (array['janvier', 'février', 'mars', 'avril', 'mai', 'juin', 'juillet', 'août',
                                             'septembre', 'octobre', 'novembre', 'décembre'])[extract(month from md.d + 4)::int]
                                   || ', je sens la pression.',
                              'Dîner avec ma sœur ce soir, j''essaie de ne pas trop manger.',
                              'Le ' || extract(day from md.d + 6)::int || ', c''est la course, je veux être en forme.'])
                       [1 + floor(pg_temp.r(c.n::bigint * 128 + c.j * 16, 451) * 5)::int]
                  else (array['I have a presentation tomorrow and I''m pretty nervous about it.',
                              'My interview is this ' || (array['Monday', 'Tuesday', 'Wednesday', 'Thursday', 'Friday', 'Saturday', 'Sunday'])
                                   [1 + ((md.d + 2 - date '2000-01-03') % 7)] || ' and I want to feel ready.',
                              'Big deadline on ' || to_char(md.d + 4, 'Mon FMDD') || ', feeling the pressure already.',
                              'Dinner with my sister tonight, trying not to overeat.',
                              'The ' || extract(day from md.d + 6)::int
                                   || (case when extract(day from md.d + 6)::int in (1, 21, 31) then 'st'
                                            when extract(day from md.d + 6)::int in (2, 22) then 'nd'
                                            when extract(day from md.d + 6)::int in (3, 23) then 'rd' else 'th' end)
                                   || ' is the race and I want to be ready.',
                              'Meeting with my manager next week about the promotion.',
                              'Doctor''s appointment on ' || to_char(md.d + 3, 'FMMonth FMDD') || ', a bit anxious about it.'])
                       [1 + floor(pg_temp.r(c.n::bigint * 128 + c.j * 16, 451) * 7)::int] end)
            else
            (case when c.locale = 'fr'
                  then (array['Je suis crevé en ce moment, le boulot me prend tout.',
                              'J''ai marché 30 minutes ce midi, ça m''a fait du bien.',
                              'J''ai encore grignoté hier soir devant la télé.',
                              'Je dors mal depuis quelques jours.',
                              'J''ai réussi ma séance ce matin !'])[1 + (c.j * 3 + m) % 5]
                  else (array['Work has been draining me lately.',
                              'I walked for 30 minutes at lunch and it felt great.',
                              'I snacked again last night in front of the TV.',
                              'I haven''t been sleeping well this week.',
                              'Finished my workout this morning!',
                              'Not sure how to fit exercise into this week.',
                              'Feeling more motivated than last week.'])[1 + (c.j * 3 + m) % 7] end) end,
       c.start + m * 3 * interval '1 minute' + (case when m = c.msgs - 1 then interval '40 seconds' else interval '0' end)
  from cv c
 cross join lateral (select (c.start at time zone c.tzn)::date as d) md
 cross join lateral generate_series(0, c.msgs - 1) m
;

insert into learning_signals (id, user_id, signal_type, signal_data, created_at)
select pg_temp.cid(c.pfx, 15, c.j * 4 + s.k), c.user_id, s.signal_type,
       case s.signal_type
            when 'session_completed' then jsonb_build_object('domain', c.dom, 'message_count', c.msgs)
            when 'insight_saved' then jsonb_build_object('domain', c.dom, 'source', 'conversation')
            when 'style_feedback' then jsonb_build_object('domain', c.dom, 'dimension',
                 (array['direct_vs_exploratory', 'brief_vs_detailed', 'action_vs_reflective', 'challenging_vs_supportive'])[1 + c.j % 4],
                 'direction', case when c.j % 2 = 0 then 'more' else 'less' end)
            else jsonb_build_object('domain', c.dom, 'accepted', true) end,
       least({{now}}, c.start + c.msgs * 3 * interval '1 minute' + s.k * interval '1 minute')
  from cv c
 cross join lateral (
    select k, (array['session_completed', 'insight_saved', 'style_feedback', 'reflection_accepted'])[k + 1] as signal_type
      from generate_series(0, 3) k
     where k = 0 or pg_temp.r(c.n::bigint * 128 + c.j * 4 + k, 460) < 0.25) s
;

insert into pattern_cache (user_id, patterns, session_count, created_at, updated_at)
select x.id, p.patterns, floor(pg_temp.r(x.n, 470) * 5)::int,
       greatest(x.created_at, {{now}} - (1 + pg_temp.r(x.n, 471) * 20) * interval '1 day'),
       greatest(x.created_at, {{now}} - (1 + pg_temp.r(x.n, 471) * 20) * interval '1 day')
  from sx x
 cross join lateral (
    select jsonb_agg(jsonb_build_object(
               'theme', t.theme, 'occurrences', 2 + floor(pg_temp.r(x.n::bigint * 8 + t.o, 472) * 8)::int,
               'domains', to_jsonb(t.domains),
               'confidence', pg_temp.dec2(0.55 + 0.4 * pg_temp.r(x.n::bigint * 8 + t.o, 473)),
               'synthesis', t.synthesis) order by t.o) as patterns
      from (values
        (1, 'work stress before deadlines', array['career', 'stress'], 'Stress spikes in the days before work deadlines, and exercise is the first thing dropped.'),
        (2, 'evening snacking when tired', array['nutrition', 'sleep'], 'Late, tired evenings tend to end with snacking; earlier nights make the next day easier.'),
        (3, 'skipping workouts after poor sleep', array['fitness', 'sleep'], 'Workouts get skipped after short nights; short walks keep the habit alive.'),
        (4, 'quiet weeks after family visits', array['relationships', 'fitness'], 'Check-ins go quiet around family commitments and pick up again afterwards.')) t(o, theme, domains, synthesis)
     where t.o = 1 + x.n % 4 or pg_temp.r(x.n::bigint * 8 + t.o, 474) < 0.3) p
 where x.nconv >= 2;

-- Proactive pushes (seed 002) at 10:00 local, at most one a day and spaced by the user's frequency.
insert into push_log (id, user_id, push_type, content, sent_at, opened, metadata)
select pg_temp.cid(x.pfx, 17, p.k), x.id, p.push_type,
       case p.push_type
            when 'event_based' then (case when x.locale = 'fr' then 'C''est bientôt le grand jour — Comment tu te sens avant ton événement ? On en parle ?'
                                          else 'Big day coming up — How are you feeling about it? Want to talk it through?' end)
            when 'pattern_based' then (case when x.locale = 'fr' then 'On ne s''est pas parlé cette semaine — La dernière fois, la pression du travail montait. On fait le point ?'
                                            else 'Quiet week? — Last time this happened, work stress was building. Want to check in?' end)
            else (case when x.locale = 'fr' then 'Ça fait un moment — Tu veux reprendre là où on s''était arrêtés ?'
                       else 'It''s been a few days — Still thinking about what we discussed? I''m here when you are.' end) end,
       p.sent_at, pg_temp.r(x.n::bigint * 8 + p.k, 482) < 0.35,
       case p.push_type
            when 'event_based' then jsonb_build_object('layer', 'event_based', 'event_type',
                                                       (array['presentation', 'interview', 'deadline', 'race'])[1 + x.n % 4])
            when 'pattern_based' then jsonb_build_object('layer', 'pattern_based', 'pattern_theme', 'work stress before deadlines',
                                                         'domain', 'stress')
            else jsonb_build_object('layer', 're_engagement', 'domain', 'fitness', 'days_inactive', 3 + x.n % 5) end
  from sx x
 cross join lateral (
    select k, ((x.today - 1 - (k - 1) * (case x.freq when 'daily' then 2 when 'few_times_a_week' then 3 else 7 end)
                - floor(pg_temp.r(x.n::bigint * 8 + k, 480) * 2)::int) + time '10:00') at time zone x.tzn as sent_at,
           (array['event_based', 'pattern_based', 're_engagement'])[1 + floor(pg_temp.r(x.n::bigint * 8 + k, 481) * 3)::int] as push_type
      from generate_series(1, 3) k) p
 where x.has_cp and x.check_ins and x.ntok > 0 and x.push_enabled
   and p.k <= 1 + floor(pg_temp.r(x.n, 483) * 3)
   and p.sent_at > x.created_at and p.sent_at <= {{now}}
;

-- (Written here: the load runs without triggers.) A reminder time other than the default was
-- chosen by the user; every user is due at once for each job that reads the due index, whose
-- first run sets each one's next instant.
update notification_preferences set reminder_time_set_at = updated_at where daily_reminder_time <> time '20:00';
insert into job_due (job, user_id, due_at)
select j.job, u.id, 'epoch'
  from users u
 cross join (values ('reminders'), ('validate-streaks'), ('weekly-digest'), ('push-trigger'), ('generate-daily-goals')) as j(job)
on conflict (job, user_id) do nothing;
-- Each FitCircle's change mark (migration 0016), which its submissions' triggers keep.
insert into fitcircle_submission_marks (fitcircle_id, change)
select c.id, nextval('fitcircle_submission_change')
  from (select distinct fitcircle_id as id from fitcircle_data_submissions) c
 order by c.id
on conflict (fitcircle_id) do update set change = excluded.change;

-- The indexes back (see "Indexes" at the top).
set local maintenance_work_mem = '512MB';
do $seed_ix$
declare x record;
begin
    for x in select * from seed_ix loop
        execute x.ddl;
    end loop;
end
$seed_ix$;

-- Back to the caller's trigger setting.
select set_config('session_replication_role', srr, true)
  from seed_saved_settings where srr <> current_setting('session_replication_role');
