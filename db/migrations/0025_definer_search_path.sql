-- Nudge 0025: the functions that run with their owner's rights (security definer), and those they
-- call, search pg_catalog first and the session's temporary schema last, and name what they use:
-- a role that may write the tables they watch (the app's, nudge_jobs) can plant neither a
-- temporary table in their path (a trigger on it would run its SQL as the owner) nor, had it
-- ever been allowed to create in public, a function of a closer signature (public.array_agg(text)
-- taken before pg_catalog's polymorphic one). docs/security.md.

-- The submissions' change marks: every relation, aggregate and set-returning function named.
create or replace function nudge_submissions_changed() returns trigger
language plpgsql security definer set search_path = pg_catalog, public, pg_temp as $$
declare
    circles uuid[];
begin
    if tg_op = 'INSERT' then
        select pg_catalog.array_agg(distinct n.fitcircle_id) into circles from new_submissions n;
    elsif tg_op = 'DELETE' then
        select pg_catalog.array_agg(distinct o.fitcircle_id) into circles from old_submissions o;
    elsif tg_op = 'UPDATE' then
        select pg_catalog.array_agg(distinct v.circle) into circles
          from old_submissions o full join new_submissions n on n.id = o.id
         cross join lateral (values (o.fitcircle_id), (n.fitcircle_id)) v(circle)
         where v.circle is not null
           and (o.fitcircle_id, o.user_id, o.submission_date, o.steps, o.weight, o.submitted_at)
               is distinct from (n.fitcircle_id, n.user_id, n.submission_date, n.steps, n.weight, n.submitted_at);
    else
        -- A truncate: every circle's submissions are gone, and every circle gets a new mark.
        select pg_catalog.array_agg(f.id) into circles from public.fitcircles f;
    end if;
    insert into public.fitcircle_submission_marks (fitcircle_id, change)
    select c.id, pg_catalog.nextval('public.fitcircle_submission_change')
      from pg_catalog.unnest(circles) as c(id)
     where exists (select 1 from public.fitcircles f where f.id = c.id)
     order by c.id
    on conflict (fitcircle_id) do update set change = excluded.change;
    return null;
end
$$;

-- An email's log row from its events: called by nudge_apply_email_receipts, with its rights.
create or replace function nudge_email_receipts(l public.notification_logs) returns public.notification_logs
language plpgsql set search_path = pg_catalog, public, pg_temp as $$
declare
    ev record;
begin
    if l.channel <> 'email' or l.provider_id is null then
        return l;
    end if;
    select pg_catalog.count(*) as events,
           pg_catalog.min(e.occurred_at) filter (where e.type = 'email.delivered') as delivered_at,
           pg_catalog.min(e.occurred_at) filter (where e.type in ('email.opened', 'email.clicked')) as opened_at,
           pg_catalog.min(e.occurred_at) filter (where e.type = 'email.clicked') as clicked_at,
           pg_catalog.min(e.occurred_at) filter (where e.type = 'email.bounced') as bounced_at,
           (pg_catalog.array_agg(coalesce(e.bounce_type, 'Undetermined') || coalesce('/' || e.bounce_subtype, '')
                      order by e.occurred_at) filter (where e.type = 'email.bounced'))[1] as bounce,
           (pg_catalog.array_agg(e.detail order by e.occurred_at) filter (where e.type = 'email.bounced'))[1] as bounce_message,
           pg_catalog.min(e.occurred_at) filter (where e.type = 'email.complained') as complained_at,
           pg_catalog.min(e.occurred_at) filter (where e.type = 'email.delivery_delayed') as delayed_at
      into ev
      from public.email_events e
     where e.email_id = l.provider_id;
    if ev.events = 0 then
        return l;
    end if;
    -- The events' earliest times win over what the row says (an open set delivered_at before
    -- the delivery's own event came), so that the order they came in does not matter.
    l.delivered := l.delivered or ev.delivered_at is not null or ev.opened_at is not null;
    l.delivered_at := coalesce(ev.delivered_at, l.delivered_at, ev.opened_at);
    l.opened := l.opened or ev.opened_at is not null;
    l.opened_at := coalesce(ev.opened_at, l.opened_at);
    l.clicked_at := coalesce(ev.clicked_at, l.clicked_at);
    l.bounced_at := coalesce(ev.bounced_at, l.bounced_at);
    l.bounce_type := coalesce(ev.bounce, l.bounce_type);
    l.complained_at := coalesce(ev.complained_at, l.complained_at);
    if l.bounced_at is not null then
        l.status := 'failed';
        l.error_msg := coalesce(left('bounced (' || ev.bounce || ')' || coalesce(': ' || ev.bounce_message, ''), 600), l.error_msg);
    elsif l.opened then
        l.status := 'opened';
    elsif l.delivered then
        l.status := 'delivered';
    end if;
    if l.bounced_at is null then
        if ev.delayed_at is not null and not l.delivered then
            l.error_msg := 'delivery delayed: Resend is still trying the recipient''s server';
        elsif l.error_msg like 'delivery delayed:%' then
            l.error_msg := null;
        end if;
    end if;
    return l;
end $$;

-- Every other function of Nudge's (each a `nudge_` function in public): the same search path.
do $$
declare
    f regprocedure;
begin
    for f in select p.oid::regprocedure from pg_catalog.pg_proc p join pg_catalog.pg_namespace n on n.oid = p.pronamespace
              where n.nspname = 'public' and p.proname like 'nudge\_%' and p.prokind = 'f'
                and pg_catalog.pg_has_role(p.proowner, 'USAGE') loop
        execute pg_catalog.format('alter function %s set search_path = pg_catalog, public, pg_temp', f);
    end loop;
end
$$;
