-- Numbers that replied STOP to Nudge's SMS: Twilio answered 21610 to a send, or relayed the
-- reply on /webhooks/twilio. No SMS goes to such a number until it replies START (or UNSTOP,
-- YES); a call's preview goes by push instead. By number, not by user: the opt-out is the
-- phone's, as Twilio keeps it.
create table sms_opt_outs (
    phone_number text primary key,   -- E.164
    opted_out_at timestamptz not null,
    source       text not null       -- 'twilio 21610' or 'reply'
);

-- Twilio status callbacks that came before the log of their SMS was written (the dispatcher
-- that sent it still writing its batch): kept here, and applied by that write, or by the next
-- callback or dispatch run that finds the log. Kept a week at most.
create table sms_status_early (
    message_sid text primary key,
    outbox_id   bigint not null,
    status      text not null check (status in ('delivered', 'failed')),
    error_msg   text,
    received_at timestamptz not null
);
create index idx_sms_status_early_received on sms_status_early (received_at);
