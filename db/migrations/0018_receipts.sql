-- Nudge 0018: what the apps tell Nudge back, for the seeds' success metrics (`nudge report`).
--
-- A push's delivery and open, recorded by the app (or its API) on the push's notification_logs
-- rows, by the `notification_id` its payload carries (the outbox row of the delivery; a grouped
-- push carries its lead row's). With the device's token, only that device's row; without, every
-- device's row of that push. An open is a delivery too. Returns how many rows it marked (0: no
-- such push was sent, or it is older than the outbox keeps). Each time is the earliest reported,
-- whatever order the receipts come in, and an opened row never goes back to delivered.
--
--   select nudge_push_receipt(12345, 'delivered');
--   select nudge_push_receipt(12345, 'opened', '2026-11-20T08:31:07Z', '<device token>');
--
-- It runs with the rights of its owner (the role that migrates), so the app's role needs only
-- `grant execute on function nudge_push_receipt(bigint, text, timestamptz, text) to <app role>`.
create function nudge_push_receipt(p_notification_id bigint, p_event text, p_at timestamptz default now(),
                                   p_device_token text default null) returns integer
language plpgsql security definer set search_path = public, pg_temp as $$
declare
    marked integer;
begin
    if p_event is null or p_event not in ('delivered', 'opened') then
        raise exception 'nudge_push_receipt: the event is ''delivered'' or ''opened'', not %', coalesce('''' || p_event || '''', 'null')
            using errcode = '22023';
    end if;
    update notification_logs l
       set delivered = true,
           delivered_at = least(l.delivered_at, p_at),
           opened = l.opened or p_event = 'opened',
           opened_at = case when p_event = 'opened' then least(l.opened_at, p_at) else l.opened_at end,
           status = case when p_event = 'opened' or l.status = 'opened' then 'opened' else 'delivered' end
     where l.channel = 'push'
       and l.status in ('sent', 'delivered', 'opened')
       -- the rows of the delivery: its lead and the rows grouped into it, among its user's
       and l.outbox_id in (select o.id from notification_outbox o
                            where o.user_id = (select x.user_id from notification_outbox x where x.id = p_notification_id)
                              and (o.id = p_notification_id or o.delivery_id = p_notification_id))
       and (p_device_token is null
            or l.device_token_id in (select t.id from user_push_tokens t where t.user_id = l.user_id and t.device_token = p_device_token)
            or (l.device_token_id is null
                and exists (select 1 from users u where u.id = l.user_id and u.fcm_token = p_device_token)));
    get diagnostics marked = row_count;
    return marked;
end $$;

-- When a user's notifications went all off (push, email and in-app), for the opt-out rate: set
-- when the last of the three is switched off, cleared when one is switched on again.
alter table notification_preferences add column all_off_since timestamptz;
update notification_preferences set all_off_since = updated_at
 where not push_enabled and not email_enabled and not inapp_enabled;

create function nudge_preferences_all_off() returns trigger language plpgsql as $$
begin
    if not new.push_enabled and not new.email_enabled and not new.inapp_enabled then
        -- (an update's new row holds the old instant, unless the statement sets another)
        new.all_off_since := coalesce(new.all_off_since, now());
    else
        new.all_off_since := null;
    end if;
    return new;
end $$;
create trigger preferences_all_off before insert or update on notification_preferences
    for each row execute function nudge_preferences_all_off();

-- `nudge report` and the Grafana dashboard read the attempts of a period by when they were sent.
create index idx_notif_sent on notification_logs (sent_at) where sent_at is not null;
