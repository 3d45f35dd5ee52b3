-- Nudge 0027: each SMS reply Twilio relays (STOP, START) is applied once, by its MessageSid.
-- Twilio's signature covers the request but no time: a captured START replayed later would have
-- undone the user's STOP for ever. `nudge serve` records each reply's SID with what it did; the
-- same SID again changes nothing. Kept: a SID forgotten could be replayed again (a reply is a
-- few rows a day, not pruned).
create table sms_replies (
    message_sid  text primary key,
    phone_number text not null,          -- E.164
    opts_out     boolean not null,       -- true: a STOP word; false: a START word
    received_at  timestamptz not null default now()
);
create index idx_sms_replies_received on sms_replies (received_at);
