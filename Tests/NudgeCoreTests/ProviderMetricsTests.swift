import Foundation
import Testing

@testable import NudgeCore

private func at(_ text: String) -> Date { ISO8601DateFormatter().date(from: text)! }

/// A dispatch run's summary carrying `metrics` as its job's own.
private func dispatchSummary(_ metrics: [RunMetric]) -> RunSummary {
    var summary = RunSummary.ended(job: "dispatch", status: "succeeded", exitCode: 0, message: "")
    summary.jobMetrics = metrics
    return summary
}

/// The lines of `text` that are about `name`.
private func lines(_ text: String, of name: String) -> [String] {
    text.split(separator: "\n").map(String.init).filter { $0.hasPrefix(name + "{") || $0.hasSuffix(" " + name + " gauge") || $0.hasPrefix("# HELP \(name) ") }
}

@Suite struct ProviderMetricsTests {
    /// APNs down for 20 minutes with 312 notifications parked, FCM paused, Resend up, Twilio not
    /// configured with 4 SMS waiting: each provider's state one-hot, its time down, its parked
    /// rows and whether this dispatcher is configured for it, labelled with the run's job.
    @Test func eachProviderHasItsStateTimeDownAndParkedNotifications() {
        let now = at("2026-03-29T18:22:11Z")
        let readings = [
            ProviderMetrics.Reading(provider: .apns, state: .down, since: at("2026-03-29T18:02:11Z"), parked: 312),
            ProviderMetrics.Reading(provider: .fcm, state: .paused, since: at("2026-03-29T18:20:01Z").addingTimeInterval(-0.4), parked: 0),
            ProviderMetrics.Reading(provider: .resend, state: .up, since: nil, parked: 0),
            ProviderMetrics.Reading(provider: .twilio, state: .up, since: nil, parked: 4),
        ]
        let configured: [DeliveryProvider: ProviderState] = [
            .apns: .ready, .fcm: .ready, .resend: .ready,
            .twilio: .unavailable("Twilio is not configured"),
        ]
        let text = RunMonitoring.metrics(
            dispatchSummary(ProviderMetrics.metrics(readings, configured: configured, now: now)),
            endedAt: now)
        #expect(
            lines(text, of: "nudge_provider_state") == [
                "# HELP nudge_provider_state Each delivery provider's state as every dispatcher shares it (provider_health): 1 for the state it is in.",
                "# TYPE nudge_provider_state gauge",
                #"nudge_provider_state{job="dispatch",provider="apns",state="up"} 0"#,
                #"nudge_provider_state{job="dispatch",provider="apns",state="down"} 1"#,
                #"nudge_provider_state{job="dispatch",provider="apns",state="paused"} 0"#,
                #"nudge_provider_state{job="dispatch",provider="fcm",state="up"} 0"#,
                #"nudge_provider_state{job="dispatch",provider="fcm",state="down"} 0"#,
                #"nudge_provider_state{job="dispatch",provider="fcm",state="paused"} 1"#,
                #"nudge_provider_state{job="dispatch",provider="resend",state="up"} 1"#,
                #"nudge_provider_state{job="dispatch",provider="resend",state="down"} 0"#,
                #"nudge_provider_state{job="dispatch",provider="resend",state="paused"} 0"#,
                #"nudge_provider_state{job="dispatch",provider="twilio",state="up"} 1"#,
                #"nudge_provider_state{job="dispatch",provider="twilio",state="down"} 0"#,
                #"nudge_provider_state{job="dispatch",provider="twilio",state="paused"} 0"#,
            ])
        // Whole seconds since provider_health.since, paused included; 0 for a provider that is up.
        #expect(
            lines(text, of: "nudge_provider_down_seconds").suffix(4) == [
                #"nudge_provider_down_seconds{job="dispatch",provider="apns"} 1200"#,
                #"nudge_provider_down_seconds{job="dispatch",provider="fcm"} 130"#,
                #"nudge_provider_down_seconds{job="dispatch",provider="resend"} 0"#,
                #"nudge_provider_down_seconds{job="dispatch",provider="twilio"} 0"#,
            ])
        #expect(
            lines(text, of: "nudge_provider_parked").suffix(4) == [
                #"nudge_provider_parked{job="dispatch",provider="apns"} 312"#,
                #"nudge_provider_parked{job="dispatch",provider="fcm"} 0"#,
                #"nudge_provider_parked{job="dispatch",provider="resend"} 0"#,
                #"nudge_provider_parked{job="dispatch",provider="twilio"} 4"#,
            ])
        #expect(
            lines(text, of: "nudge_provider_configured").suffix(4) == [
                #"nudge_provider_configured{job="dispatch",provider="apns"} 1"#,
                #"nudge_provider_configured{job="dispatch",provider="fcm"} 1"#,
                #"nudge_provider_configured{job="dispatch",provider="resend"} 1"#,
                #"nudge_provider_configured{job="dispatch",provider="twilio"} 0"#,
            ])
        // Each family once, its HELP and TYPE before its samples, after the runner's own.
        for name in ["nudge_provider_state", "nudge_provider_down_seconds", "nudge_provider_parked", "nudge_provider_configured"] {
            #expect(text.components(separatedBy: "# TYPE \(name) gauge\n").count == 2, "\(name)")
        }
        #expect(text.range(of: "# TYPE nudge_run_outcomes gauge")!.lowerBound < text.range(of: "# TYPE nudge_provider_state")!.lowerBound)
        #expect(text.hasSuffix("\n"))
    }

    /// A shard's file labels the providers' series with its shard too, so that two shards on one
    /// machine (or two machines) never write the same series; a clock behind `since` (a run at
    /// an earlier `--now`) never makes a time down negative.
    @Test func aShardsLinesCarryItsShardAndTimeDownIsNeverNegative() throws {
        let readings = [ProviderMetrics.Reading(provider: .apns, state: .down, since: at("2026-03-29T18:00:00Z"), parked: 0)]
        let metrics = ProviderMetrics.metrics(readings, configured: [:], now: at("2026-03-29T17:00:00Z"))
        let text = RunMonitoring.metrics(dispatchSummary(metrics), shard: try Shard("1/2"), endedAt: Date())
        #expect(text.contains(#"nudge_provider_down_seconds{job="dispatch",shard="1/2",provider="apns"} 0"#), "\(text)")
        #expect(text.contains(#"nudge_provider_configured{job="dispatch",shard="1/2",provider="apns"} 0"#), "\(text)")
    }

    /// The runner writes a job's own gauges as the text format wants them: label values and help
    /// escaped, whole numbers without a decimal point; and leaves out one node-exporter would
    /// refuse (which would drop the run's whole file) or one that takes the runner's names.
    @Test func aJobsOwnMetricsAreEscapedAndABadOneIsLeftOut() {
        let metrics = [
            RunMetric(
                name: "nudge_example", help: "A back\\slash\nand a line.",
                samples: [.init(["reason": "say \"no\"\nback\\slash"], 2.5), .init(["reason": "none"], 3)]),
            RunMetric(name: "nudge example", help: "a space in its name", samples: [.init([:], 1)]),
            RunMetric(name: "nudge_run_users", help: "the runner's", samples: [.init([:], 1)]),
            RunMetric(name: "nudge_other", help: "a label the runner writes", samples: [.init(["job": "x"], 1)]),
            RunMetric(name: "nudge_other", help: "a label name with a dash", samples: [.init(["a-b": "x"], 1)]),
        ]
        let text = RunMonitoring.metrics(dispatchSummary(metrics), endedAt: Date())
        #expect(text.contains("# HELP nudge_example A back\\\\slash\\nand a line.\n"), "\(text)")
        #expect(text.contains(#"nudge_example{job="dispatch",reason="say \"no\"\nback\\slash"} 2.5"#), "\(text)")
        #expect(text.contains(#"nudge_example{job="dispatch",reason="none"} 3"# + "\n"), "\(text)")
        #expect(!text.contains("nudge example") && !text.contains("the runner's") && !text.contains("nudge_other"), "\(text)")
        #expect(RunMetric.format(.infinity) == "+Inf" && RunMetric.format(-1e20) == "-1e+20" && RunMetric.format(0.25) == "0.25")
    }
}
