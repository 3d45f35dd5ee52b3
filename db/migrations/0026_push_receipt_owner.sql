-- Nudge 0026: a push's receipt names its user, and its time is bounded by when the push was sent.
-- An app that forwards its clients' receipts let any user mark anyone's push (the id alone found
-- it), and a time before the push was sent stayed for ever (the earliest time wins). Now the
-- receipt finds only its own user's push, and its time is taken between the push's sending and
-- five minutes from now (a phone's clock may run a little fast). docs/report.md.
drop function nudge_push_receipt(bigint, text, timestamptz, text);

create function nudge_push_receipt(p_user uuid, p_notification_id bigint, p_event text, p_at timestamptz default now(),
                                   p_device_token text default null) returns integer
language plpgsql security definer set search_path = pg_catalog, public, pg_temp as $$
declare
    marked integer;
    -- No later than five minutes from now; no earlier than each row's sending (below).
    at_most constant timestamptz := least(coalesce(p_at, pg_catalog.now()), pg_catalog.now() + interval '5 minutes');
begin
    if p_event is null or p_event not in ('delivered', 'opened') then
        raise exception 'nudge_push_receipt: the event is ''delivered'' or ''opened'', not %', coalesce('''' || p_event || '''', 'null')
            using errcode = '22023';
    end if;
    if p_user is null then
        raise exception 'nudge_push_receipt: the user is required' using errcode = '22023';
    end if;
    update public.notification_logs l
       set delivered = true,
           delivered_at = least(l.delivered_at, greatest(at_most, coalesce(l.sent_at, l.created_at))),
           opened = l.opened or p_event = 'opened',
           opened_at = case when p_event = 'opened' then least(l.opened_at, greatest(at_most, coalesce(l.sent_at, l.created_at)))
                            else l.opened_at end,
           status = case when p_event = 'opened' or l.status = 'opened' then 'opened' else 'delivered' end
     where l.channel = 'push'
       and l.user_id = p_user
       and l.status in ('sent', 'delivered', 'opened')
       -- the rows of the delivery: its lead and the rows grouped into it, of this user's
       and l.outbox_id in (select o.id from public.notification_outbox o
                            where o.user_id = p_user
                              and (o.id = p_notification_id or o.delivery_id = p_notification_id))
       and (p_device_token is null
            or l.device_token_id in (select t.id from public.user_push_tokens t
                                      where t.user_id = p_user and t.device_token = p_device_token)
            or (l.device_token_id is null
                and exists (select 1 from public.users u where u.id = p_user and u.fcm_token = p_device_token)));
    get diagnostics marked = row_count;
    return marked;
end $$;
revoke execute on function nudge_push_receipt(uuid, bigint, text, timestamptz, text) from public;
