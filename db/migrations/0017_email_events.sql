-- Nudge 0017: what becomes of an email after Resend took it. Resend's webhooks (on `nudge serve`,
-- POST /webhooks/resend) are kept here, one row per event (its svix-id, the same on each of
-- Resend's retries: a retry finds its row and changes nothing; a delivery that is not newer than
-- the last one seen, svix_timestamp, is a replay and is refused), and each email's log row is set
-- from all the events of its email (`provider_id`, the id Resend answered the send with),
-- whatever order they came in.
create table email_events (
    svix_id        text primary key,
    svix_timestamp bigint not null,       -- the latest delivery's svix-timestamp
    email_id       text,                  -- data.email_id; null for an event of another family
    type           text not null,         -- email.delivered, email.bounced, email.complained, ...
    occurred_at    timestamptz not null,  -- the event's created_at (when it was received, if none)
    address        text,                  -- data.to[0], lowercased
    bounce_type    text,                  -- Permanent, Transient, Undetermined
    bounce_subtype text,
    detail         text,                  -- the bounce's message
    received_at    timestamptz not null default now()
);
create index idx_email_events_email on email_events (email_id) where email_id is not null;
create index idx_email_events_received on email_events (received_at);

-- What the events say of each email, on its log row (the seed's `delivered`, `delivered_at`,
-- `opened`, `opened_at` and `status` too).
alter table notification_logs
    add column clicked_at    timestamptz,
    add column bounced_at    timestamptz,
    add column bounce_type   text,        -- 'Permanent/General', 'Transient/MailboxFull', ...
    add column complained_at timestamptz;
create index idx_notif_email_provider_id on notification_logs (provider_id) where channel = 'email';
create index idx_email_logs_provider_id on email_logs (provider_id);

-- Addresses no email goes to any more: one that bounced hard (Resend's `Permanent`), or whose
-- owner marked an email as spam. By address, lowercased, not by user: a user who changes their
-- address gets email again; the address itself stays refused.
create table email_suppressions (
    address       text primary key,
    reason        text not null check (reason in ('hard_bounce', 'complaint')),
    detail        text,
    email_id      text,
    suppressed_at timestamptz not null
);

-- An email's log row as its events leave it: delivered, opened (a click is an open, where the
-- open pixel was blocked), clicked, bounced (status 'failed' with the bounce's message),
-- complained; a delay is said while nothing else is known. The same events give the same row, in
-- whatever order they came. Used by the webhook (for the emails an event names) and by the
-- trigger below (for a log written after its email's first events).
create function nudge_email_receipts(l notification_logs) returns notification_logs
language plpgsql as $$
declare
    ev record;
begin
    if l.channel <> 'email' or l.provider_id is null then
        return l;
    end if;
    select count(*) as events,
           min(e.occurred_at) filter (where e.type = 'email.delivered') as delivered_at,
           min(e.occurred_at) filter (where e.type in ('email.opened', 'email.clicked')) as opened_at,
           min(e.occurred_at) filter (where e.type = 'email.clicked') as clicked_at,
           min(e.occurred_at) filter (where e.type = 'email.bounced') as bounced_at,
           (array_agg(coalesce(e.bounce_type, 'Undetermined') || coalesce('/' || e.bounce_subtype, '')
                      order by e.occurred_at) filter (where e.type = 'email.bounced'))[1] as bounce,
           (array_agg(e.detail order by e.occurred_at) filter (where e.type = 'email.bounced'))[1] as bounce_message,
           min(e.occurred_at) filter (where e.type = 'email.complained') as complained_at,
           min(e.occurred_at) filter (where e.type = 'email.delivery_delayed') as delayed_at
      into ev
      from email_events e
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

-- A log written after its email's first events (the webhook came while the dispatcher that sent
-- the email was still writing its batch) starts from them.
create function nudge_email_log_written() returns trigger language plpgsql as $$
begin
    return nudge_email_receipts(new);
end $$;
create trigger email_log_receipts before insert on notification_logs
    for each row when (new.channel = 'email' and new.provider_id is not null)
    execute function nudge_email_log_written();

create function nudge_email_seed_log_written() returns trigger language plpgsql as $$
begin
    select new.opened or coalesce(bool_or(e.type in ('email.opened', 'email.clicked')), false),
           new.clicked or coalesce(bool_or(e.type = 'email.clicked'), false)
      into new.opened, new.clicked
      from email_events e where e.email_id = new.provider_id;
    return new;
end $$;
create trigger email_seed_log_receipts before insert on email_logs
    for each row when (new.provider_id is not null)
    execute function nudge_email_seed_log_written();
