-- Nudge 0028: what `nudge serve` writes, it writes through functions that can do only that.
-- The server faces the internet; its role could insert and update preferences (so turn an email
-- back on), delete opt-outs and read every user's address. Now it may call these, which run
-- with the owner's rights (search path pinned, every name qualified, docs/security.md), and
-- roles.sql takes its table rights away:
-- - nudge_unsubscribe_state / nudge_unsubscribe: an email type's switches, read, or set off
--   (never on);
-- - nudge_sms_reply: a STOP or START relayed by Twilio, applied once by its MessageSid;
-- - nudge_email_event: one of Resend's events, kept once by its svix-id, applied to its
--   email's log, and, for a hard bounce or a complaint, the address suppressed (a complaint
--   also turns its user's optional emails off);
-- - nudge_sms_status / nudge_apply_kept_sms_statuses: Twilio's status of an SMS on its log
--   row, or kept for a log not written yet, and applied once it is.

-- The two switches of an email type (an EmailType's raw value): its email_preferences column
-- and its notification_preferences one. Anything else is refused.
create function nudge_email_type_columns(p_type text, out email_column text, out notification_column text)
language plpgsql immutable set search_path = pg_catalog, pg_temp as $$
begin
    case p_type
        when 'daily_checkin_reminder' then email_column := 'daily_checkin_reminder'; notification_column := 'email_daily_checkin';
        when 'streak_at_risk' then email_column := 'streak_at_risk'; notification_column := 'email_streak_risk';
        when 'weekly_digest' then email_column := 'weekly_digest'; notification_column := 'email_weekly_digest';
        when 'monthly_report' then email_column := 'monthly_report'; notification_column := 'email_monthly_report';
        else raise exception 'nudge: no email type %', coalesce('''' || p_type || '''', 'null') using errcode = '22023';
    end case;
end $$;
revoke execute on function nudge_email_type_columns(text) from public;

-- Whether the user's email of that type is on (both switches, a missing row being on), and
-- their locale; no row when the user is gone.
create function nudge_unsubscribe_state(p_user uuid, p_type text) returns table (locale text, subscribed boolean)
language plpgsql stable security definer set search_path = pg_catalog, public, pg_temp as $$
declare
    c record;
begin
    select t.email_column, t.notification_column into c from public.nudge_email_type_columns(p_type) t;
    return query execute pg_catalog.format(
        'select u.locale::text, coalesce(ep.%I, true) and coalesce(np.%I, true)
           from public.users u
           left join public.email_preferences ep on ep.user_id = u.id
           left join public.notification_preferences np on np.user_id = u.id
          where u.id = $1', c.email_column, c.notification_column)
        using p_user;
end $$;
revoke execute on function nudge_unsubscribe_state(uuid, text) from public;

-- Turns the user's email of that type off in both tables (creating the rows with the defaults
-- where there are none); whether anything changed, and the locale. No row when the user is gone.
create function nudge_unsubscribe(p_user uuid, p_type text) returns table (locale text, changed boolean)
language plpgsql security definer set search_path = pg_catalog, public, pg_temp as $$
declare
    c record;
begin
    select t.email_column, t.notification_column into c from public.nudge_email_type_columns(p_type) t;
    return query execute pg_catalog.format(
        'with target as (select u.id, u.locale from public.users u where u.id = $1),
         emails as (
             insert into public.email_preferences as p (user_id, %1$I, updated_at)
             select t.id, false, pg_catalog.now() from target t
             on conflict (user_id) do update set %1$I = false, updated_at = pg_catalog.now()
              where p.%1$I
             returning 1),
         notifications as (
             insert into public.notification_preferences as p (user_id, %2$I, updated_at)
             select t.id, false, pg_catalog.now() from target t
             on conflict (user_id) do update set %2$I = false, updated_at = pg_catalog.now()
              where p.%2$I
             returning 1)
         select t.locale::text, (select pg_catalog.count(*) from emails) + (select pg_catalog.count(*) from notifications) > 0
           from target t', c.email_column, c.notification_column)
        using p_user;
end $$;
revoke execute on function nudge_unsubscribe(uuid, text) from public;

-- A reply relayed by Twilio: a STOP (p_opts_out) records the number's opt-out, a START lifts it,
-- each once by its MessageSid (true when applied now, false for a SID seen before). A STOP
-- without its SID is applied all the same (an opt-out is never lost); a START without one is
-- refused.
create function nudge_sms_reply(p_message_sid text, p_phone_number text, p_opts_out boolean) returns boolean
language plpgsql security definer set search_path = pg_catalog, public, pg_temp as $$
declare
    fresh integer;
begin
    if p_phone_number is null or p_phone_number !~ '^\+[1-9][0-9]{6,14}$' then
        raise exception 'nudge_sms_reply: % is no E.164 number', coalesce('''' || p_phone_number || '''', 'null') using errcode = '22023';
    end if;
    if p_opts_out is null then
        raise exception 'nudge_sms_reply: a reply stops or starts' using errcode = '22023';
    end if;
    if p_message_sid is null or p_message_sid = '' then
        if not p_opts_out then
            raise exception 'nudge_sms_reply: a START needs its MessageSid' using errcode = '22023';
        end if;
        insert into public.sms_opt_outs (phone_number, opted_out_at, source) values (p_phone_number, pg_catalog.now(), 'reply')
        on conflict (phone_number) do nothing;
        return true;
    end if;
    insert into public.sms_replies (message_sid, phone_number, opts_out) values (p_message_sid, p_phone_number, p_opts_out)
    on conflict (message_sid) do nothing;
    get diagnostics fresh = row_count;
    if fresh = 0 then
        return false;
    end if;
    if p_opts_out then
        insert into public.sms_opt_outs (phone_number, opted_out_at, source) values (p_phone_number, pg_catalog.now(), 'reply')
        on conflict (phone_number) do nothing;
    else
        delete from public.sms_opt_outs o where o.phone_number = p_phone_number;
    end if;
    return true;
end $$;
revoke execute on function nudge_sms_reply(text, text, boolean) from public;

-- One of Resend's events, verified by the caller: kept once by its svix-id and applied to its
-- email's log (nudge_apply_email_receipts). The outcome:
-- 'busy' (another event of the email is being recorded: answer 503), 'repeated' (an open or
-- click after an earlier one), 'replayed' (this svix-id with a timestamp not newer), 'retried'
-- (this svix-id again, newer), 'logged' or 'unlogged' (kept; whether the email has a log).
-- A complaint, or a bounce of type 'Permanent', suppresses the address.
create function nudge_email_event(p_svix_id text, p_svix_timestamp bigint, p_email_id text, p_type text, p_occurred_at timestamptz,
                                  p_to text, p_bounce_type text, p_bounce_subtype text, p_detail text, p_received_at timestamptz)
returns text
language plpgsql security definer set search_path = pg_catalog, public, pg_temp as $$
declare
    inserted boolean;
    kept_address text;
    logged boolean;
    complaint constant boolean := p_type = 'email.complained';
    suppress constant boolean := p_type = 'email.complained' or (p_type = 'email.bounced' and p_bounce_type = 'Permanent');
    suppression_detail text;
begin
    if p_svix_id is null or p_email_id is null or p_type is null then
        raise exception 'nudge_email_event: the svix-id, the email and the type are required' using errcode = '22023';
    end if;
    -- One event of an email at a time, none waiting for another.
    if not pg_catalog.pg_try_advisory_xact_lock(pg_catalog.hashtext('nudge.email:' || p_email_id)) then
        return 'busy';
    end if;
    -- Only an email's first open and first click (one that happened no later: Resend may send an
    -- earlier one after a later one).
    if p_type in ('email.opened', 'email.clicked') and exists (
        select 1 from public.email_events e
         where e.email_id = p_email_id and e.type = p_type and e.svix_id <> p_svix_id
           and e.occurred_at <= coalesce(p_occurred_at, p_received_at)) then
        return 'repeated';
    end if;
    -- The address as dispatch compares it (lower(btrim(users.email))); for an event without one,
    -- its email's user's.
    insert into public.email_events as e (svix_id, svix_timestamp, email_id, type, occurred_at, address, bounce_type, bounce_subtype,
                                          detail, received_at)
    values (p_svix_id, p_svix_timestamp, p_email_id, p_type, coalesce(p_occurred_at, p_received_at),
            coalesce(pg_catalog.lower(pg_catalog.btrim(p_to)),
                     (select pg_catalog.lower(pg_catalog.btrim(u.email)) from public.notification_logs l join public.users u on u.id = l.user_id
                       where l.channel = 'email' and l.provider_id = p_email_id limit 1)),
            p_bounce_type, p_bounce_subtype, pg_catalog.left(p_detail, 1000), p_received_at)
    on conflict (svix_id) do update set svix_timestamp = excluded.svix_timestamp
     where e.svix_timestamp < excluded.svix_timestamp
    returning (e.xmax = 0), e.address into inserted, kept_address;
    if not found then
        return 'replayed';
    end if;
    if not inserted then
        return 'retried';
    end if;
    logged := exists (select 1 from public.nudge_apply_email_receipts(array[p_email_id]));
    if suppress and kept_address is not null then
        suppression_detail := case when complaint then 'marked as spam'
                                   else pg_catalog.concat_ws(': ', p_bounce_subtype, p_detail) end;
        insert into public.email_suppressions (address, reason, detail, email_id, suppressed_at)
        values (kept_address, case when complaint then 'complaint' else 'hard_bounce' end, pg_catalog.left(suppression_detail, 500),
                p_email_id, coalesce(p_occurred_at, p_received_at))
        on conflict (address) do nothing;
        if complaint then
            -- The user of the email's log or, for an email Nudge has no log of, the users with that
            -- address: every optional email off.
            with logged_users as (select distinct l.user_id from public.notification_logs l
                                   where l.channel = 'email' and l.provider_id = p_email_id),
            target as (select lu.user_id from logged_users lu
                       union
                       select u.id from public.users u
                        where not exists (select 1 from logged_users) and pg_catalog.lower(pg_catalog.btrim(u.email)) = kept_address),
            emails as (
                insert into public.email_preferences as p (user_id, daily_checkin_reminder, streak_at_risk, weekly_digest, monthly_report,
                                                           updated_at)
                select t.user_id, false, false, false, false, pg_catalog.now() from target t
                on conflict (user_id) do update set daily_checkin_reminder = false, streak_at_risk = false, weekly_digest = false,
                                                    monthly_report = false, updated_at = pg_catalog.now()
                returning 1)
            insert into public.notification_preferences as p (user_id, email_daily_checkin, email_streak_risk, email_weekly_digest,
                                                              email_monthly_report, updated_at)
            select t.user_id, false, false, false, false, pg_catalog.now() from target t
            on conflict (user_id) do update set email_daily_checkin = false, email_streak_risk = false, email_weekly_digest = false,
                                                email_monthly_report = false, updated_at = pg_catalog.now();
        end if;
    end if;
    return case when logged then 'logged' else 'unlogged' end;
end $$;
revoke execute on function nudge_email_event(text, bigint, text, text, timestamptz, text, text, text, text, timestamptz) from public;

-- Twilio's status of an SMS ('delivered' or 'failed', with Twilio's reason), on the SMS's log
-- row: found by its SID, or, for an SMS whose answer never came (its outcome recorded as unknown),
-- by the outbox row the callback's URL names when no log has the SID. A delivered SMS is never
-- set back. The outcome: 'recorded'; 'ignored' (its log has it already: a late callback); 'kept'
-- (no log yet, but the callback names Nudge's outbox row: kept, applied when the log is);
-- 'unknown' (no log, no outbox row named).
create function nudge_sms_status(p_sid text, p_status text, p_error text, p_outbox_id bigint) returns text
language plpgsql security definer set search_path = pg_catalog, public, pg_temp as $$
declare
    updated integer;
begin
    if p_sid is null or p_sid = '' then
        raise exception 'nudge_sms_status: the MessageSid is required' using errcode = '22023';
    end if;
    if p_status is null or p_status not in ('delivered', 'failed') then
        raise exception 'nudge_sms_status: the status is ''delivered'' or ''failed'', not %', coalesce('''' || p_status || '''', 'null')
            using errcode = '22023';
    end if;
    update public.notification_logs l
       set status = p_status, delivered = l.delivered or p_status = 'delivered',
           delivered_at = case when p_status = 'delivered' then coalesce(l.delivered_at, pg_catalog.now()) else l.delivered_at end,
           error_msg = coalesce(nullif(p_error, ''), case when p_status = 'delivered' then null else l.error_msg end),
           provider_id = coalesce(l.provider_id, p_sid)
     where l.channel = 'sms' and l.status not in ('delivered', 'opened')
       and (l.provider_id = p_sid
            or (l.provider_id is null and l.outbox_id = coalesce(p_outbox_id, -1) and l.error_msg like 'outcome unknown%'
                and not exists (select 1 from public.notification_logs k where k.channel = 'sms' and k.provider_id = p_sid)));
    get diagnostics updated = row_count;
    if updated > 0 then
        return 'recorded';
    end if;
    if exists (select 1 from public.notification_logs l where l.channel = 'sms' and l.provider_id = p_sid) then
        return 'ignored';
    end if;
    if p_outbox_id is null then
        return 'unknown';
    end if;
    -- A delivery outranks a failure.
    insert into public.sms_status_early as e (message_sid, outbox_id, status, error_msg, received_at)
    values (p_sid, p_outbox_id, p_status, nullif(p_error, ''), pg_catalog.now())
    on conflict (message_sid) do update
       set status = case when e.status = 'delivered' then 'delivered' else excluded.status end,
           error_msg = case when e.status = 'delivered' then null else excluded.error_msg end;
    -- The log may have been written meanwhile, after its write read the kept statuses.
    perform public.nudge_apply_kept_sms_statuses(p_kept_seconds => 7 * 24 * 3600);
    return 'kept';
end $$;
revoke execute on function nudge_sms_status(text, text, text, bigint) from public;

-- Applies the kept statuses whose logs are written now, and forgets those older than
-- p_kept_seconds (a day at least); how many were applied. Dispatch runs it too, after its batches.
create function nudge_apply_kept_sms_statuses(p_kept_seconds double precision) returns integer
language plpgsql security definer set search_path = pg_catalog, public, pg_temp as $$
declare
    applied integer;
begin
    with stale as (
        delete from public.sms_status_early e
         where e.received_at < pg_catalog.now() - pg_catalog.make_interval(secs => greatest(p_kept_seconds, 86400))
    ), found as (
        select e.message_sid, e.status, e.error_msg, e.received_at, l.id as log_id
          from public.sms_status_early e
          join public.notification_logs l
            on l.channel = 'sms'
           and (l.provider_id = e.message_sid
                or (l.provider_id is null and l.outbox_id = e.outbox_id and l.error_msg like 'outcome unknown%'))
    ), forgotten as (
        delete from public.sms_status_early e using found f where e.message_sid = f.message_sid
    )
    update public.notification_logs l
       set status = f.status, delivered = l.delivered or f.status = 'delivered',
           delivered_at = case when f.status = 'delivered' then coalesce(l.delivered_at, f.received_at) else l.delivered_at end,
           error_msg = coalesce(f.error_msg, case when f.status = 'delivered' then null else l.error_msg end),
           provider_id = coalesce(l.provider_id, f.message_sid)
      from found f
     where l.id = f.log_id and l.status not in ('delivered', 'opened');
    get diagnostics applied = row_count;
    return applied;
end $$;
revoke execute on function nudge_apply_kept_sms_statuses(double precision) from public;
