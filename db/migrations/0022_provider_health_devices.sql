-- Nudge 0022: a provider is down when several devices say so, and paused for unknown tokens
-- when many distinct devices do (docs/jobs/dispatch.md, "Provider health"). The windows keep
-- short digests of the devices (or addresses, or requests) their answers came from, never a
-- token or an address, and at most a few dozen of them.
alter table provider_health
    add column window_outage_devices text[] not null default '{}',
    add column tokens_unknown_devices text[] not null default '{}';

-- A token called unknown is believed once the provider has taken tokens under the same
-- configuration (who it is configured as, never a secret) since it was last paused: counted
-- here, so that a quiet night's few answers still confirm it.
alter table provider_health
    add column tokens_config text,
    add column tokens_accepted integer not null default 0;
