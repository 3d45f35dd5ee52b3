-- Nudge seed data: `nudge seed --users N --seed S --now T`.
--
-- The Swift side replaces {{users}}, {{seed}} and {{now}} and runs this whole text as one
-- multi-statement string, inside one transaction, on an empty migrated database. Plain SQL only:
-- helpers live in pg_temp and temporary tables are dropped at commit, so only data rows remain.
--
-- Determinism: nothing here reads the clock or a random generator, and every column is set
-- explicitly. Pseudo-random numbers are pg_temp.r(key, field): a 53-bit uniform from PostgreSQL's
-- hashint8extended of the key, salted with the seed and the field number. User ids are
-- md5(seed ':users:' n); the rows that belong to a user get ids made of the first 64 bits of the
-- user's id, a per-table tag and a row number, so every table is filled in primary-key order.
--
-- History ends at {{now}}: no timestamp after it (except the scheduled_at of pending calls, which
-- are the calls of the next hours), no tracking date after the user's local today.
--
-- Streaks follow validate-streaks' rules exactly (see the recursive query "streak replay" below).

set local jit = off;
set local work_mem = '256MB';

-- A superuser seeds without firing the foreign-key triggers (as pg_restore --disable-triggers
-- does): every reference is built consistent, and this halves the time of a large seed. Anyone
-- else seeds with the checks on. Restored at the end of this script.
create temp table seed_saved_settings on commit drop as
    select current_setting('session_replication_role') as srr;
select set_config('session_replication_role', 'replica', true)
  from pg_roles where rolname = current_user and rolsuper;

-- Helpers ------------------------------------------------------------------------------------------

-- Uniform [0, 1) from (key, field), salted with the seed.
create function pg_temp.r(k bigint, f int) returns float8 language sql immutable as
$f$ select ((hashint8extended(k, hashint8extended(({{seed}})::bigint, f)) >> 11)
            & 9007199254740991)::float8 / 9007199254740992.0 $f$;

-- Standard normal from (key, field) and (key, field + 1) (Box-Muller).
create function pg_temp.nz(k bigint, f int) returns float8 language sql immutable as
$f$ select sqrt(-2.0 * ln(1.0 - pg_temp.r(k, f))) * cos(6.283185307179586 * pg_temp.r(k, f + 1)) $f$;

-- A local wall-clock time in a zone, as an instant, never after now.
create function pg_temp.at(l timestamp, tz text) returns timestamptz language sql stable as
$f$ select least(l at time zone tz, {{now}}) $f$;

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
$f$ select case when platform = 'ios'
                then md5(({{seed}})::text || ':apns:' || n || ':' || j) || md5(({{seed}})::text || ':apns2:' || n || ':' || j)
                else translate(encode(decode(md5(({{seed}})::text || ':fcm:' || n || ':' || j), 'hex'), 'base64'), '+/=', '-_')
                     || ':APA91b'
                     || translate(encode(decode(repeat(md5(({{seed}})::text || ':fcm1:' || n || ':' || j)
                                                       || md5(({{seed}})::text || ':fcm2:' || n || ':' || j), 3), 'hex'), 'base64'),
                                  '+/=' || chr(10), '-_')
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
    select array_agg(name order by zi) as names, array_agg(fr order by zi) as frs,
           count(*)::int as nz,
           (select array_agg(c order by zi)
              from (select zi, sum(w) over (order by zi) / sum(w) over () as c from sz) x
             where zi < (select count(*) from sz)) as cum
      from sz),
b as (
    select n,
           md5(({{seed}})::text || ':users:' || n)::uuid as id,
           case when n <= zc.nz then n else width_bucket(pg_temp.r(n, 1), zc.cum) + 1 end as zi,
           n > zc.nz and pg_temp.r(n, 2) < 0.02 as notz,
           pg_temp.r(n, 6) as r_sg, pg_temp.r(n, 7) as r_sg2,
           pg_temp.r(n, 5) as r_en, pg_temp.r(n, 8) as r_act, pg_temp.r(n, 10) as r_hab,
           zc.names, zc.frs
      from generate_series(1, {{users}}) n cross join zc),
c as (
    select b.*,
           case when notz then null else names[zi] end as tz,
           case when notz then 'UTC' else names[zi] end as tzn,
           case when r_sg < 0.08 then r_sg2 * 7
                when r_sg < 0.22 then 7 + r_sg2 * 53
                else 60 + r_sg2 * 340 end as xdays,
           case when pg_temp.r(n, 3) < (case when notz then 0.05 else frs[zi] end) then 'fr' else 'en' end as locale
      from b),
d as (
    select c.*,
           {{now}} - make_interval(secs => floor(xdays * 86400)) as created_at,
           xdays < 7 as isnew,
           ({{now}} at time zone tzn) as lt
      from c)
select n, id, left(id::text, 19) as pfx, tz, tzn, locale, created_at, isnew, lt,
       lt::date as today,
       extract(epoch from lt - lt::date)::float8 / 86400 as frac,
       (created_at at time zone tzn) as sl,
       (created_at at time zone tzn)::date as sd,
       -- coach: Mama Rosa mostly for French speakers
       case when locale = 'fr' then (case when pg_temp.r(n, 4) < 0.8 then 3 when pg_temp.r(n, 4) < 0.9 then 1 else 2 end)
            else (case when pg_temp.r(n, 4) < 0.5 then 1 when pg_temp.r(n, 4) < 0.95 then 2 else 3 end) end as persona,
       -- engagement: 1 dedicated, 2 regular, 3 lapsing, 4 churned (new users are keen)
       case when isnew then (case when r_en < 0.35 then 1 when r_en < 0.85 then 2 else 3 end)
            else (case when r_en < 0.13 then 1 when r_en < 0.43 then 2 when r_en < 0.68 then 3 else 4 end) end as e,
       floor(pg_temp.r(n, 16) * (case when isnew then 5 else 45 end))::int as al,
       3 + floor(pg_temp.r(n, 16) * 240)::int as ca,
       0.9 + 0.1 * pg_temp.r(n, 18) as pu,
       -- activity: sedentary / moderate / active
       case when r_act < 0.3 then 1 when r_act < 0.75 then 2 else 3 end as act,
       case when r_act < 0.3 then 3000 + 2000 * pg_temp.r(n, 9)
            when r_act < 0.75 then 6000 + 3000 * pg_temp.r(n, 9)
            else 10000 + 4000 * pg_temp.r(n, 9) end as base,
       0.75 + 0.4 * pg_temp.r(n, 19) as wkend,
       pg_temp.r(n, 20) < 0.07 as nosync,
       -- check-in habit, minutes after local midnight: morning, midday or evening
       case when r_hab < 0.45 then 420 + 150 * pg_temp.r(n, 11)
            when r_hab < 0.6 then 720 + 90 * pg_temp.r(n, 11)
            else 1140 + 210 * pg_temp.r(n, 11) end as habit,
       pg_temp.r(n, 12) < 0.55 as wlogger,
       0.2 + 0.6 * pg_temp.r(n, 13) as pw,
       125 + 150 * power(pg_temp.r(n, 14), 1.4) as w0,
       -0.15 + 0.17 * pg_temp.r(n, 15) as trend,
       2.6 + 1.6 * pg_temp.r(n, 21) as mm,
       2.5 + 1.6 * pg_temp.r(n, 22) as em,
       0.3 + 0.6 * pg_temp.r(n, 23) as subp,
       case when pg_temp.r(n, 24) < 0.45 then 1 when pg_temp.r(n, 24) < 0.8 then 2 else 3 end as mu,
       row_number() over (order by hashint8extended(n, ({{seed}})::bigint), n) - 1 as pr,
       -- phone numbers (fictional ranges), channels, devices
       case when pg_temp.r(n, 40) >= 0.85 then null
            when locale = 'fr' or tzn in ('Europe/Paris', 'Indian/Reunion')
                 then '+336' || lpad(floor(pg_temp.r(n, 41) * 100000000)::bigint::text, 8, '0')
            when tzn = 'Europe/London' then '+447700900' || lpad(floor(pg_temp.r(n, 41) * 1000)::int::text, 3, '0')
            else '+1555' || lpad(floor(pg_temp.r(n, 41) * 10000000)::bigint::text, 7, '0') end as phone,
       case when pg_temp.r(n, 40) >= 0.85 or pg_temp.r(n, 42) < 0.8 then 'push_only'
            when pg_temp.r(n, 42) < 0.87 then 'sms_only' else 'push_and_sms' end as npref,
       pg_temp.r(n, 43) >= 0.08 as push_enabled,
       case when pg_temp.r(n, 44) < 0.75 then 5 when pg_temp.r(n, 44) < 0.85 then 10
            when pg_temp.r(n, 44) < 0.92 then 15 when pg_temp.r(n, 44) < 0.97 then 2 else 0 end as lead,
       case when pg_temp.r(n, 45) < 0.12 then 0 when pg_temp.r(n, 45) < 0.77 then 1 else 2 end as ntok,
       case when pg_temp.r(n, 46) < 0.55 then 'ios' else 'android' end as plat1,
       case when pg_temp.r(n, 47) < 0.5 then 'ios' else 'android' end as plat2,
       pg_temp.r(n, 48) < 0.15 as legacy
  from d;

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
with pool as (
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
           (array_agg(fitcircle_id order by slot) filter (where ctype = 'steps' and hi_d >= lo_d))[1] as sc_id,
           (array_agg(goal order by slot) filter (where ctype = 'steps' and hi_d >= lo_d))[1] as sc_goal,
           (array_agg(fitcircle_id order by slot) filter (where ctype = 'weight_loss' and hi_d >= lo_d))[1] as wc_id
      from mr group by n)
select u.*,
       greatest(u.sd, u.today - 59) as ws,
       greatest(u.today - 2, u.sd - 1) as st,
       u.today - greatest(u.sd, u.today - 59) as nd,
       greatest(u.today - 2, u.sd - 1) - greatest(u.sd, u.today - 59) as iend,
       pg_temp.mon(u.today) as mon_t,
       date_trunc('month', u.today)::date as mstart,
       extract(epoch from u.sl - u.sd)::float8 / 60 as slm,
       extract(epoch from u.lt - u.today)::float8 / 60 as ltm,
       agg.m1lo, agg.m1hi, agg.m2lo, agg.m2hi, agg.m3lo, agg.m3hi, agg.sc_id, agg.sc_goal, agg.wc_id
  from su0 u left join agg using (n)
 order by u.id;

-- Daily tracking, as a function of (user, day) -----------------------------------------------------

analyze su (n);

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

-- The last amax + 1 local days of a user (never before sign-up): whether a row exists and its
-- values. Times are minutes after the local midnight `mid` (an instant, computed when wantmid).
-- The user's attributes come as scalars (a whole-row argument is much slower to read).
create function pg_temp.days(n int, nd int, ws date, sd date, slm float8, ltm float8, tz text,
                             habit float8, e int, al int, ca int, pu float8, nosync boolean,
                             base float8, wkend float8, frac float8, wlogger boolean, pw float8,
                             w0 float8, trend float8, mm float8, em float8, subp float8,
                             m1lo date, m1hi date, m2lo date, m2hi date, m3lo date, m3hi date,
                             amax int, wantmid boolean)
returns table (i int, a int, d date, pres boolean, ci boolean, part boolean, mid timestamptz,
               cim float8, steps int, weight numeric, mood int, energy int, pds text, pdsteps int,
               sub boolean, subm float8, clm float8, ulm float8)
language sql stable as
$f$
select i, a, d, pres, ci, part, mid, cim,
       case when pres then pg_temp.stp(n, nosync, base, wkend, frac, a, wd) end as steps,
       case when pres and wlogger and pg_temp.r(k, 212) < pw
            then round((w0 + trend * (59 - a) + 0.5 * pg_temp.tri(k, 213))::numeric, 1) end as weight,
       mood,
       case when ci then greatest(1, least(5, round(em + 0.5 * (mood - mm) + 0.8 * pg_temp.tri(k, 210))))::int end as energy,
       case when pf then
            case when pdsteps is null then (case when mood >= 4 then 'great' when mood = 3 then 'ok' else 'could_be_better' end)
                 when pdsteps >= base * (0.95 + 0.2 * pg_temp.r(k, 216)) then 'great'
                 when pdsteps >= base * (0.6 + 0.2 * pg_temp.r(k, 216)) then 'ok'
                 else 'could_be_better' end end as pds,
       pdsteps, sub, case when sub then subm end as subm, clm,
       least(case when a = 0 then ltm end,
             greatest(clm, case when ci or part then cim end, case when sub then subm end,
                      1230 + 149 * pg_temp.r(k, 221))) as ulm
  from (
    select s1.*,
           case when pf and a + 1 <= nd and pg_temp.r(k + 1, 206) < pg_temp.popen(e, al, ca, pu, a + 1, (wd + 6) % 7)
                then pg_temp.stp(n, nosync, base, wkend, frac, a + 1, (wd + 6) % 7) end as pdsteps
      from (
        select s0.*,
               part0 and not ci as part,
               case when ci or part0 then greatest(1, least(5, round(mm + 0.9 * pg_temp.tri(k, 208))))::int end as mood,
               ci and pg_temp.r(k, 215) < 0.35 as pf,
               least(1379.0, case when ci then cim + 2 + 10 * pg_temp.r(k, 218) else 1140 + 239 * pg_temp.r(k, 218) end) as subm,
               pres and not nosync and a <= 6 and pg_temp.r(k, 217) < subp
                 and (a > 0 or least(1379.0, case when ci then cim + 2 + 10 * pg_temp.r(k, 218) else 1140 + 239 * pg_temp.r(k, 218) end) <= ltm)
                 and (coalesce(d between m1lo and m1hi, false) or coalesce(d between m2lo and m2hi, false)
                      or coalesce(d between m3lo and m3hi, false)) as sub,
               greatest(least(360 + 180 * pg_temp.r(k, 219), cim - 1 - 20 * pg_temp.r(k, 220)),
                        case when d = sd then slm end) as clm
          from (
            select i, a, d, k, wd, cim, pres,
                   pres and (d > sd or cim >= slm + 10)
                     and pg_temp.r(k, 205) < (case e when 1 then 0.93::float8 when 2 then 0.68::float8
                                                    when 3 then (case when a > al then 0.7::float8 else 0.3::float8 end)
                                                    else 0.6::float8 end) as ci,
                   pres and pg_temp.r(k, 207) < 0.03 as part0,
                   case when wantmid and pres then (d::timestamp at time zone tz) end as mid
              from (
                select g as i, nd - g as a, ws + g as d, n::bigint * 64 + (nd - g) as k,
                       ((ws + g) - date '2000-01-03') % 7 as wd,
                       least(1379.0, greatest(360.0, habit + (pg_temp.r(n::bigint * 64 + (nd - g), 204) - 0.5) * 80.0)) as cim
                  from generate_series(greatest(0, nd - amax), case when e = 4 then least(nd, nd - ca - 1) else nd end) g
              ) s00
              cross join lateral (
                select pg_temp.r(k, 206) < pg_temp.popen(e, al, ca, pu, a, wd) and (a > 0 or cim <= ltm) as pres) p
            offset 0
          ) s0
        offset 0
      ) s1
    offset 0
  ) s2
$f$;

-- What the streak replay needs from each user's days.
-- (JIT pays off on the three statements that evaluate millions of user-days.)
set local jit = on;
create temp table sm on commit drop as
select u.n, x.*
  from su u
 cross join lateral (
    select coalesce(bit_or(1::bigint << d.i) filter (where d.ci and d.d <= u.st), 0) as cmask,
           min(d.a) filter (where d.pres) as a_last
      from pg_temp.days(u.n, u.nd, u.ws, u.sd, u.slm, u.ltm, u.tzn, u.habit, u.e, u.al, u.ca, u.pu,
                        u.nosync, u.base, u.wkend, u.frac, u.wlogger, u.pw, u.w0, u.trend, u.mm, u.em,
                        u.subp, u.m1lo, u.m1hi, u.m2lo, u.m2hi, u.m3lo, u.m3hi, 59, false) d) x;

set local jit = off;
analyze sm;

-- Streak replay: validate-streaks' rules, day by day from the first check-in of the window up to
-- settled_through (the days before it, sign-up included, are all misses: streak 0). One row per
-- user per step; the state after the last settled day is the user's user_streaks row. zm marks
-- the days that reset the streak, from which each check-in's streak_day is derived.
set local jit = on;
create temp table sk on commit drop as
with recursive b as (
    select u.n, u.iend, u.ws - date '2000-01-03' as wsn, u.ws - u.sd as mis0, u.ws > u.sd as pre,
           m.cmask as cm,
           case when m.cmask = 0 then -1 else pg_temp.hibit(m.cmask & -m.cmask) end as i0
      from su u join sm m using (n)),
r as (
    select n, i0 as i, iend, wsn, cm,
           0 as cur, 0 as lng, mis0 + i0 as mis, false as frz,
           case when i0 > 0 or pre then (wsn + i0 - 1) - (wsn + i0 - 1) % 7 end as wk,
           null::int as lci, null::int as b7, null::int as b30, null::int as b100, 0::bigint as zm
      from b where cm <> 0
    union all
    select n, i + 1, iend, wsn, cm,
           case when c then cur + 1 when cur > 0 and mis = 0 then cur else 0 end,
           case when c then greatest(lng, cur + 1) else lng end,
           case when c then 0 when cur > 0 and mis = 0 then (case when f then 1 else 0 end) else mis + 1 end,
           case when c then f when cur > 0 and mis = 0 then true else f end,
           mw,
           case when c then dn else lci end,
           case when b7 is null and c and cur + 1 = 7 then dn else b7 end,
           case when b30 is null and c and cur + 1 = 30 then dn else b30 end,
           case when b100 is null and c and cur + 1 = 100 then dn else b100 end,
           case when not c and not (cur > 0 and mis = 0) then zm | (1::bigint << i) else zm end
      from r
     cross join lateral (
        select wsn + i as dn, (wsn + i) - (wsn + i) % 7 as mw, ((cm >> i) & 1) = 1 as c,
               case when wk is distinct from (wsn + i) - (wsn + i) % 7 then false else frz end as f) v
     where i <= iend)
select n, cur, lng, mis, frz, wk, lci, b7, b30, b100, zm, cm from r where i = iend + 1
union all
select n, 0, 0, case when iend >= 0 then mis0 + iend + 1 else 0 end, false,
       case when iend >= 0 then (wsn + iend) - (wsn + iend) % 7 end, null, null, null, null, 0, 0
  from b where cm = 0;
set local jit = off;
analyze sk;

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

set local jit = on;
insert into daily_tracking (id, user_id, date, steps, weight, mood, energy, checked_in_at,
                            previous_day_sentiment, previous_day_steps, streak_day,
                            submitted_to_fitcircles, submission_timestamp, created_at, updated_at)
select pg_temp.cid(u.pfx, 1, x.d - date '2000-01-01'), u.id, x.d, x.steps, x.weight, x.mood, x.energy,
       case when x.ci then least(x.mid + make_interval(secs => floor(x.cim * 60)), {{now}}) end,
       x.pds, x.pdsteps,
       -- the streak after this check-in: the check-ins since the last reset
       case when x.ci and x.d <= u.st then
            bit_count((k.cm & ((1::bigint << (x.i + 1)) - 1)
                       & ~((1::bigint << (pg_temp.hibit(k.zm & ((1::bigint << x.i) - 1)) + 1)) - 1))::bit(64))::int end,
       x.sub,
       case when x.sub then least(x.mid + make_interval(secs => floor(x.subm * 60)), {{now}}) end,
       greatest(u.created_at, least(x.mid + make_interval(secs => floor(x.clm * 60)), {{now}})),
       greatest(u.created_at, least(x.mid + make_interval(secs => floor(x.ulm * 60)), {{now}}))
  from su u join sk k using (n)
 cross join lateral pg_temp.days(u.n, u.nd, u.ws, u.sd, u.slm, u.ltm, u.tzn, u.habit, u.e, u.al, u.ca, u.pu,
                                 u.nosync, u.base, u.wkend, u.frac, u.wlogger, u.pw, u.w0, u.trend, u.mm, u.em,
                                 u.subp, u.m1lo, u.m1hi, u.m2lo, u.m2hi, u.m3lo, u.m3hi, 59, true) x
 where x.pres;

set local jit = off;
insert into user_streaks (id, user_id, current_streak, longest_streak, last_checkin_date,
                          freeze_used_this_week, week_start_date, created_at, updated_at,
                          settled_through, missed_days)
select pg_temp.cid(u.pfx, 2, 0), u.id, k.cur, k.lng, date '2000-01-03' + k.lci, k.frz,
       date '2000-01-03' + k.wk, u.created_at,
       case when u.st >= u.sd
            then greatest(u.created_at, least({{now}}, ((u.st + 1) + time '00:05') at time zone u.tzn))
            else u.created_at end,
       u.st, k.mis
  from su u join sk k using (n);

insert into user_badges (user_id, badge, earned_at)
select u.id, b.badge, least({{now}}, ((date '2000-01-03' + b.dn + 1) + time '00:05') at time zone u.tzn)
  from su u join sk k using (n)
 cross join lateral (values (1, 'week_warrior', k.b7), (2, 'monthly_master', k.b30), (3, 'centurion', k.b100)) b(o, badge, dn)
 where b.dn is not null
 order by u.id, b.o;

-- Goals of the recent days and weeks ---------------------------------------------------------------

create temp table rc on commit drop as
select u.n, x.*
  from su u
 cross join lateral (
    select max(d.steps) filter (where d.a = 0) as s_a0,
           max(d.steps) filter (where d.a = 1) as s_a1,
           coalesce(bool_or(d.ci) filter (where d.a = 0), false) as ci_a0,
           coalesce(bool_or(d.ci) filter (where d.a = 1), false) as ci_a1,
           max(d.weight) filter (where d.a = 0) as w_a0,
           max(d.weight) filter (where d.a = 1) as w_a1,
           max(d.weight) filter (where d.a = 2) as w_a2,
           avg(d.steps) filter (where d.a between 1 and 7) as avg_0,
           avg(d.steps) filter (where d.a between 2 and 8) as avg_1,
           coalesce(sum(d.steps) filter (where d.d >= u.mon_t), 0) as s_wk,
           count(*) filter (where d.ci and d.d >= u.mon_t) as c_wk,
           count(*) filter (where d.steps >= 3000 and d.d >= u.mon_t) as act_wk,
           coalesce(jsonb_object_agg((array['Mon', 'Tue', 'Wed', 'Thu', 'Fri', 'Sat', 'Sun'])[d.d - u.mon_t + 1], d.steps)
                        filter (where d.steps is not null and d.d >= u.mon_t), '{}') as j_wk,
           coalesce(sum(d.steps) filter (where d.d < u.mon_t and d.d >= u.mon_t - 7), 0) as s_pwk,
           count(*) filter (where d.ci and d.d < u.mon_t and d.d >= u.mon_t - 7) as c_pwk,
           count(*) filter (where d.steps >= 3000 and d.d < u.mon_t and d.d >= u.mon_t - 7) as act_pwk,
           coalesce(jsonb_object_agg((array['Mon', 'Tue', 'Wed', 'Thu', 'Fri', 'Sat', 'Sun'])[d.d - u.mon_t + 8], d.steps)
                        filter (where d.steps is not null and d.d < u.mon_t and d.d >= u.mon_t - 7), '{}') as j_pwk
      from pg_temp.days(u.n, u.nd, u.ws, u.sd, u.slm, u.ltm, u.tzn, u.habit, u.e, u.al, u.ca, u.pu,
                        u.nosync, u.base, u.wkend, u.frac, u.wlogger, u.pw, u.w0, u.trend, u.mm, u.em,
                        u.subp, u.m1lo, u.m1hi, u.m2lo, u.m2hi, u.m3lo, u.m3hi,
                        greatest(8, u.today - u.mon_t + 7), false) d
     where d.pres) x;

-- Yesterday's goals (closed) and today's (open; not yet generated for a few users).
insert into daily_goals (id, user_id, date, goal_type, target_value, actual_value, completed, created_at)
select pg_temp.cid(u.pfx, 3, (g.day - date '2000-01-01') * 8 + g.t), u.id, g.day, g.goal_type,
       g.target, g.actual, coalesce(g.actual >= g.target, false) and g.goal_type <> 'weight'
                           or (g.goal_type = 'weight' and coalesce(g.actual <= g.target, false)),
       greatest(u.created_at + interval '1 minute',
                least({{now}}, (g.day + time '00:05' + pg_temp.r(u.n::bigint * 4 + g.a, 310) * interval '50 minutes') at time zone u.tzn))
  from su u join rc c using (n)
 cross join lateral (
    select v.a, u.today - v.a as day, v.t, v.goal_type,
           case v.goal_type
                when 'steps' then (case when u.today - v.a - u.sd < 7 or (case v.a when 0 then c.avg_0 else c.avg_1 end) is null
                                        then (case when u.act = 1 then 5000 else 7000 end)
                                        else least(15000, round((case v.a when 0 then c.avg_0 else c.avg_1 end) * 1.1 / 100) * 100) end)
                when 'checkin' then 1
                else -0.2 end::numeric as target,
           case v.goal_type
                when 'steps' then coalesce(case v.a when 0 then c.s_a0 else c.s_a1 end, 0)
                when 'checkin' then (case when (case v.a when 0 then c.ci_a0 else c.ci_a1 end) then 1 else 0 end)
                else (case v.a when 0 then c.w_a0 - c.w_a1 else c.w_a1 - c.w_a2 end) end::numeric as actual
      from (values (1, 1, 'steps'), (1, 2, 'checkin'), (1, 3, 'weight'),
                   (0, 1, 'steps'), (0, 2, 'checkin'), (0, 3, 'weight')) v(a, t, goal_type)
     where u.today - v.a >= u.sd
       and (v.a = 1 or (u.ltm >= 60 and pg_temp.r(u.n, 311) < 0.9))
       and (v.goal_type <> 'weight' or (u.wc_id is not null and u.wlogger and u.today - v.a - u.sd >= 7))
     order by v.a desc, v.t) g;

-- This week's goals and last week's, for the users active in the last two weeks.
insert into weekly_goals (id, user_id, week_start, goal_type, target_value, actual_value,
                          daily_breakdown, completed, fitcircle_id, created_at)
select pg_temp.cid(u.pfx, 4, (g.wk - date '2000-01-03') * 8 + g.t), u.id, g.wk, g.goal_type,
       g.target, g.actual, g.breakdown, coalesce(g.actual >= g.target, false), g.fc,
       greatest(u.created_at + interval '1 minute',
                least({{now}}, (g.wk + time '00:10' + pg_temp.r(u.n::bigint * 4 + g.t, 312) * interval '40 minutes') at time zone u.tzn))
  from su u join rc c using (n) join sm m using (n)
 cross join lateral (
    select w.wk, v.t, v.goal_type,
           case v.goal_type
                when 'steps' then coalesce(u.sc_goal, case when u.isnew then 50000
                                                          else least(105000, round(u.base * 7.7 / 1000) * 1000) end)
                when 'streak' then 7
                when 'active_days' then 5
                else 1.0 end::numeric as target,
           case v.goal_type
                when 'steps' then (case when w.cur then c.s_wk else c.s_pwk end)
                when 'streak' then (case when w.cur then c.c_wk else c.c_pwk end)
                when 'active_days' then (case when w.cur then c.act_wk else c.act_pwk end)
                else null end::numeric as actual,
           case when v.goal_type = 'steps' then (case when w.cur then c.j_wk else c.j_pwk end) else '{}'::jsonb end as breakdown,
           case v.goal_type when 'steps' then u.sc_id when 'weight' then u.wc_id end as fc
      from (values (u.mon_t - 7, false), (u.mon_t, true)) w(wk, cur),
           (values (1, 'steps'), (2, 'streak'), (3, 'active_days'), (4, 'weight')) v(t, goal_type)
     where w.wk >= u.sd
       and (v.goal_type <> 'weight' or u.wc_id is not null)
     order by w.wk, v.t) g
 where m.a_last <= 13;

-- FitCircles, members, submissions, leaderboards -----------------------------------------------------

insert into fitcircles (id, name, challenge_type, timezone, starts_on, ends_on, challenge_step_goal, created_at)
select id, name, ctype, tz, starts_on, ends_on, goal, created_at from fc order by id;

insert into fitcircle_members (fitcircle_id, user_id, joined_at, left_at, starting_weight, target_weight)
select fitcircle_id, user_id, joined_at, left_at, starting_weight, target_weight
  from fm order by fitcircle_id, user_id;

insert into fitcircle_data_submissions (id, fitcircle_id, user_id, submission_date, steps, weight,
                                        submitted_at, rank_after_submission, rank_change)
select id, fitcircle_id, user_id, d, steps, weight, sat, rk,
       lag(rk) over (partition by fitcircle_id, user_id order by d) - rk
  from (
    select pg_temp.cid(u.pfx, 5, f.c::bigint * 4096 + (x.d - date '2000-01-01')) as id,
           f.fitcircle_id, u.id as user_id, x.d, x.steps, x.weight,
           least(x.mid + make_interval(secs => floor(x.subm * 60)), {{now}}) as sat,
           row_number() over (partition by f.fitcircle_id, x.d
                              order by case when f.ctype = 'steps' then x.steps::numeric
                                            else f.starting_weight - coalesce(x.weight, f.starting_weight) end desc nulls last,
                                       x.mid + make_interval(secs => floor(x.subm * 60)), u.id) as rk
      from su u
     cross join lateral pg_temp.days(u.n, u.nd, u.ws, u.sd, u.slm, u.ltm, u.tzn, u.habit, u.e, u.al, u.ca, u.pu,
                                     u.nosync, u.base, u.wkend, u.frac, u.wlogger, u.pw, u.w0, u.trend, u.mm, u.em,
                                     u.subp, u.m1lo, u.m1hi, u.m2lo, u.m2hi, u.m3lo, u.m3hi, 6, true) x
      join fm f on f.n = u.n
                and x.d between greatest(f.starts_on, (f.joined_at at time zone u.tzn)::date)
                            and least(f.ends_on, coalesce((f.left_at at time zone u.tzn)::date - 1, u.today))
     where u.m1lo is not null and x.sub) s
 order by user_id, id;

insert into fitcircle_leaderboard_entries (id, fitcircle_id, user_id, period, period_start, metric_type,
                                           metric_value, rank, rank_change, last_updated)
with mem as (
    select f.c, f.fitcircle_id, f.user_id, f.n, f.ctype, f.ct, f.starts_on, f.starting_weight, f.target_weight,
           greatest(f.starts_on, (f.joined_at at time zone f.tzn)::date) as lo_d, f.w0, f.trend, u.wlogger, u.pfx
      from fm f join su u using (n)
     where f.left_at is null and f.starts_on <= f.ct and pg_temp.r(f.c, 120) < 0.5),
st as (
    select m.fitcircle_id, m.user_id,
           sum(t.steps) filter (where t.date = m.ct) as s_day,
           sum(t.steps) filter (where t.date >= pg_temp.mon(m.ct)) as s_week,
           sum(t.steps) filter (where t.date >= date_trunc('month', m.ct)::date) as s_month,
           sum(t.steps) as s_all,
           max(t.updated_at) as ach
      from mem m join daily_tracking t on t.user_id = m.user_id and t.date >= m.lo_d and t.date <= m.ct
     where m.ctype = 'steps'
     group by 1, 2),
v as (
    select m.*, p.period, p.o,
           case p.period when 'daily' then m.ct when 'weekly' then pg_temp.mon(m.ct)
                         when 'monthly' then date_trunc('month', m.ct)::date else m.starts_on end as period_start,
           case when m.ctype = 'steps'
                then coalesce(case p.period when 'daily' then st.s_day when 'weekly' then st.s_week
                                            when 'monthly' then st.s_month else st.s_all end, 0)
                when not m.wlogger or m.starting_weight is null then 0
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
           row_number() over (partition by fitcircle_id, period order by metric desc, ach, user_id) as rnk,
           count(*) over (partition by fitcircle_id, period) as cnt
      from v)
select pg_temp.cid(pfx, 6, c::bigint * 8 + o), fitcircle_id, user_id, period, period_start,
       case when ctype = 'steps' then 'steps' else 'weight_loss_pct' end, metric, rnk,
       case when period <> 'all_time'
            then least(cnt, greatest(1, rnk + round(1.5 * pg_temp.tri(n::bigint * 4096 + c * 8 + o, 121))::int)) - rnk end,
       {{now}} - pg_temp.r(n::bigint * 4096 + c * 8 + o, 123) * interval '5 minutes'
  from rk
 order by user_id, c, o;

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
 order by x.id, t.j;

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
 where pg_temp.r(x.n, 364) < 0.4
 order by x.id;

insert into email_preferences (id, user_id, daily_checkin_reminder, streak_at_risk, weekly_digest,
                               monthly_report, fitcircle_invites, challenge_milestones,
                               unsubscribe_token, updated_at)
select pg_temp.cid(x.pfx, 9, 0), x.id, x.e_checkin, x.e_streak, x.e_digest, x.e_monthly,
       pg_temp.r(x.n, 365) < 0.95, pg_temp.r(x.n, 366) < 0.97,
       md5(({{seed}})::text || ':unsubscribe:' || x.n) || left(md5(({{seed}})::text || ':unsubscribe2:' || x.n), 16),
       case when x.e_digest and x.e_monthly and x.e_checkin and x.e_streak then x.created_at
            else x.created_at + ({{now}} - x.created_at) * pg_temp.r(x.n, 367) end
  from sx x order by x.id;

-- Emails sent: the welcome email, the last two weekly digests, this month's report, now and then a
-- streak-at-risk email or a check-in reminder (users without a device).
insert into email_logs (id, user_id, email_type, sent_at, opened, clicked, provider_id)
select pg_temp.cid(x.pfx, 10, e.j), x.id, e.email_type, e.sent_at,
       e.opened, e.opened and pg_temp.r(x.n::bigint * 16 + e.j, 372) < 0.3,
       'msg_' || left(md5(({{seed}})::text || ':email:' || x.n || ':' || e.j), 24)
  from sx x
 cross join lateral (
    select j, email_type, sent_at, pg_temp.r(x.n::bigint * 16 + j, 371) < 0.45 as opened
      from (values
        (0, 'welcome', x.created_at + interval '1 minute' + pg_temp.r(x.n, 380) * interval '40 seconds', true),
        (1, 'weekly_digest', ((x.today - (x.today - date '2000-01-02') % 7 - 7) + time '20:00') at time zone x.tzn,
            x.e_digest and pg_temp.r(x.n, 381) < 0.9),
        (2, 'weekly_digest', ((x.today - (x.today - date '2000-01-02') % 7) + time '20:00') at time zone x.tzn,
            x.e_digest and pg_temp.r(x.n, 382) < 0.9),
        (3, 'monthly_report', (date_trunc('month', x.today)::date + time '09:00') at time zone x.tzn,
            x.e_monthly and pg_temp.r(x.n, 383) < 0.85),
        (4, 'streak_at_risk', ((x.today - 1 - floor(pg_temp.r(x.n, 384) * 10)::int) + time '09:00') at time zone x.tzn,
            x.e_streak and pg_temp.r(x.n, 385) < 0.15),
        (5, 'daily_checkin_reminder', ((x.today - 1 - floor(pg_temp.r(x.n, 386) * 5)::int) + time '21:00') at time zone x.tzn,
            x.e_checkin and x.ntok = 0 and pg_temp.r(x.n, 387) < 0.6)
      ) v(j, email_type, sent_at, wanted)
     where wanted and sent_at <= {{now}} and sent_at > x.created_at) e
 order by x.id, e.j;

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

insert into scheduled_calls (id, user_id, scheduled_at, status, topic, preview_sent, preview_sent_at, created_at, updated_at)
select id, user_id, scheduled_at, status, topic, preview_sent,
       case when preview_sent then scheduled_at - lead * interval '1 minute' end,
       created_at,
       case status when 'pending' then created_at
                   when 'cancelled' then created_at + (scheduled_at - created_at) * 0.5
                   else scheduled_at + (case when status = 'completed' then 12 else 2 end) * interval '1 minute' end
  from sc order by id;

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
    select c.n, c.pfx, c.user_id, c.id as call_id, c.j * 2 + p.k as j,
           p.type, null::text as ntype, p.channel,
           case when c.status = 'failed' and p.k = 0 then 'failed'
                when p.channel = 'sms' then 'delivered'
                when pg_temp.r(c.n::bigint * 16 + c.j, 400) < 0.55 then 'opened' else 'delivered' end as status,
           case when p.channel = 'push' then c.coach || (case when c.locale = 'fr' then ' t''appelle dans ' else ' is calling in ' end)
                                             || c.lead || ' min' end as title,
           case when c.locale = 'fr'
                then (case when p.channel = 'sms' then 'Coach ' || c.coach || ' t''appelle dans ' || c.lead || ' min ! Décroche !'
                           else 'Point du jour : ' || c.topic end)
                else (case when p.channel = 'sms' then 'Coach ' || c.coach || ' calling in ' || c.lead || ' min! Answer!'
                           else 'Today''s topic: ' || c.topic end) end as body,
           jsonb_build_object('call_id', c.id, 'topic', c.topic, 'kind', 'call_preview') as payload,
           c.scheduled_at - c.lead * interval '1 minute' + p.k * interval '30 seconds' as sent_at,
           c.scheduled_at - c.lead * interval '1 minute' as created_at
      from sc c
     cross join lateral (values
        (0, case when c.npref = 'sms_only' or c.ntok = 0 or not c.push_enabled then 'preview_sms' else 'preview_push' end,
            case when c.npref = 'sms_only' or c.ntok = 0 or not c.push_enabled then 'sms' else 'push' end),
        (1, 'fallback_sms', 'sms')) p(k, type, channel)
     where c.preview_sent and c.scheduled_at - c.lead * interval '1 minute' <= {{now}} - interval '1 minute'
       and (c.npref <> 'push_only' or c.ntok > 0 or c.phone is not null)
       and (p.k = 0 or (c.status = 'failed' and c.phone is not null and c.npref <> 'push_only'))
       and (p.k = 1 or c.npref <> 'sms_only' or c.phone is not null)
    union all
    -- engagement notifications
    select x.n, x.pfx, x.id, null, 100 + v.j, null, v.ntype,
           case when x.ntok = 0 then 'inapp' else 'push' end,
           v.status,
           case v.ntype when 'daily_checkin' then (case when x.locale = 'fr' then 'Ton check-in du jour' else 'Daily check-in' end)
                        when 'streak_risk' then (case when x.locale = 'fr' then 'Ta série est en jeu' else 'Your streak is at risk' end)
                        when 'weekly_goal' then (case when x.locale = 'fr' then 'Objectif de la semaine' else 'Weekly goal progress' end)
                        when 'data_submission' then (case when x.locale = 'fr' then 'Envoie tes pas' else 'Submit your steps' end)
                        when 'leaderboard_change' then (case when x.locale = 'fr' then 'Classement' else 'Leaderboard update' end)
                        else (case when x.locale = 'fr' then 'Ta semaine' else 'Your week in review' end) end,
           case v.ntype when 'daily_checkin' then (case when x.locale = 'fr' then 'Fais ton check-in pour garder ta série !' else 'Complete your check-in to keep your streak alive!' end)
                        when 'streak_risk' then (case when x.locale = 'fr' then 'Tu as manqué hier. Ne rate pas deux jours de suite !' else 'You missed yesterday. Never miss twice!' end)
                        when 'weekly_goal' then (case when x.locale = 'fr' then 'Tu es à mi-semaine, encore un effort !' else 'You''re halfway through the week. You''ve got this!' end)
                        when 'data_submission' then (case when x.locale = 'fr' then 'Envoie tes pas du jour à ton FitCircle avant minuit !' else 'Submit today''s steps to your FitCircles before midnight!' end)
                        when 'leaderboard_change' then (case when x.locale = 'fr' then 'Tu as gagné des places dans ton FitCircle !' else 'You moved up in your FitCircle!' end)
                        else (case when x.locale = 'fr' then 'Ton résumé de la semaine est prêt.' else 'Your weekly summary is ready.' end) end,
           jsonb_build_object('type', v.ntype, 'deep_link', 'fitcircle://' || replace(v.ntype, '_', '-')),
           case when v.status in ('suppressed', 'deferred', 'queued') then null else v.at end,
           v.at
      from sx x
     cross join lateral (
        select j, ntype, at,
               case when pg_temp.r(x.n::bigint * 64 + 100 + j, 402) < 0.25 then 'opened'
                    when pg_temp.r(x.n::bigint * 64 + 100 + j, 402) < 0.78 then 'delivered'
                    when pg_temp.r(x.n::bigint * 64 + 100 + j, 402) < 0.86 then 'sent'
                    when pg_temp.r(x.n::bigint * 64 + 100 + j, 402) < 0.92 then (case when x.ntok = 0 then 'delivered' else 'failed' end)
                    when pg_temp.r(x.n::bigint * 64 + 100 + j, 402) < 0.98 then 'suppressed' else 'deferred' end as status
          from (
            select j, (array['daily_checkin', 'streak_risk', 'weekly_goal', 'daily_checkin', 'data_submission',
                             'leaderboard_change', 'weekly_digest', 'daily_checkin'])[j] as ntype,
                   ((x.today - 1 - floor(pg_temp.r(x.n::bigint * 64 + 100 + j, 401) * 13)::int)
                     + (array[time '20:00', time '09:00', time '18:00', time '20:00', time '20:00',
                              time '13:17', time '20:00', time '20:00'])[j]) at time zone x.tzn as at
              from generate_series(1, 8) j
             where pg_temp.r(x.n::bigint * 64 + 100 + j, 400) < (case when x.e = 4 and x.a_last is null then 0.03 else 0.22 end)
          ) s
         where at > x.created_at and at <= {{now}}) v
  ) t
 order by user_id, j;

-- The coach: profiles, conversations, signals, patterns, proactive pushes ---------------------------

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
               'sessions_per_week', round((0.5 + 4.5 * pg_temp.r(x.n, 426))::numeric, 1)),
           'last_reflection_at', case when pg_temp.r(x.n, 427) < 0.6
                                      then to_char(greatest(x.created_at, {{now}} - pg_temp.r(x.n, 428) * interval '21 days') at time zone 'UTC',
                                                   'YYYY-MM-DD"T"HH24:MI:SS"Z"') end),
       ds.styles,
       x.created_at + interval '2 minutes',
       x.created_at + interval '2 minutes' + ({{now}} - x.created_at - interval '2 minutes') * pg_temp.r(x.n, 429)
  from sx x
 cross join lateral (
    select coalesce(jsonb_object_agg(dom, jsonb_build_object(
               'direct_vs_exploratory', round(pg_temp.r(x.n::bigint * 8 + o, 431)::numeric, 2),
               'brief_vs_detailed', round(pg_temp.r(x.n::bigint * 8 + o, 432)::numeric, 2),
               'action_vs_reflective', round(pg_temp.r(x.n::bigint * 8 + o, 433)::numeric, 2),
               'challenging_vs_supportive', round(pg_temp.r(x.n::bigint * 8 + o, 434)::numeric, 2))), '{}') as styles
      from unnest(array['fitness', 'stress', 'career', 'nutrition']) with ordinality d(dom, o)
     where pg_temp.r(x.n::bigint * 8 + o, 430) < (case when o = 1 then 0.8 else 0.3 end)) ds
 where x.has_cp
 order by x.id;

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
  from cv order by id;

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
 order by c.user_id, c.j, m;

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
 order by c.user_id, c.j, s.k;

insert into pattern_cache (user_id, patterns, session_count, created_at, updated_at)
select x.id, p.patterns, floor(pg_temp.r(x.n, 470) * 5)::int,
       greatest(x.created_at, {{now}} - (1 + pg_temp.r(x.n, 471) * 20) * interval '1 day'),
       greatest(x.created_at, {{now}} - (1 + pg_temp.r(x.n, 471) * 20) * interval '1 day')
  from sx x
 cross join lateral (
    select jsonb_agg(jsonb_build_object(
               'theme', t.theme, 'occurrences', 2 + floor(pg_temp.r(x.n::bigint * 8 + t.o, 472) * 8)::int,
               'domains', to_jsonb(t.domains),
               'confidence', round((0.55 + 0.4 * pg_temp.r(x.n::bigint * 8 + t.o, 473))::numeric, 2),
               'synthesis', t.synthesis) order by t.o) as patterns
      from (values
        (1, 'work stress before deadlines', array['career', 'stress'], 'Stress spikes in the days before work deadlines, and exercise is the first thing dropped.'),
        (2, 'evening snacking when tired', array['nutrition', 'sleep'], 'Late, tired evenings tend to end with snacking; earlier nights make the next day easier.'),
        (3, 'skipping workouts after poor sleep', array['fitness', 'sleep'], 'Workouts get skipped after short nights; short walks keep the habit alive.'),
        (4, 'quiet weeks after family visits', array['relationships', 'fitness'], 'Check-ins go quiet around family commitments and pick up again afterwards.')) t(o, theme, domains, synthesis)
     where t.o = 1 + x.n % 4 or pg_temp.r(x.n::bigint * 8 + t.o, 474) < 0.3) p
 where x.nconv >= 2
 order by x.id;

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
 order by x.id, p.k;

-- Back to the caller's trigger setting.
select set_config('session_replication_role', srr, true)
  from seed_saved_settings where srr <> current_setting('session_replication_role');
