import Foundation
import Testing

@testable import NudgeCore

private func day(_ text: String) -> LocalDate { LocalDate(iso8601: text)! }
private func time(_ text: String) -> LocalTime { LocalTime(text)! }
private func instant(_ text: String) -> Date { ISO8601DateFormatter().date(from: text)! }
private func calendar(_ zone: String?) -> LocalCalendar { try! LocalCalendar(identifier: zone) }

@Suite struct LocalDateTests {
    @Test func parsesAndPrintsISODays() {
        #expect(day("2026-03-14").description == "2026-03-14")
        #expect(day("1970-01-01").daysSinceEpoch == 0)
        #expect(day("2000-03-01").daysSinceEpoch == 11_017)
        #expect(day("2024-02-29").adding(days: 1) == day("2024-03-01"))
    }

    @Test(arguments: ["2026-02-30", "2025-02-29", "2026-13-01", "2026-3-14", "14/03/2026", "", "2026-03-14T00:00"])
    func rejectsDaysThatDoNotExist(_ text: String) {
        #expect(LocalDate(iso8601: text) == nil)
    }

    @Test func knowsTheWeekdayAndItsMonday() {
        #expect(day("2026-03-16").isoWeekday == 1)   // Monday
        #expect(day("2026-03-22").isoWeekday == 7)   // Sunday
        #expect(day("2026-03-22").monday == day("2026-03-16"))
        #expect(day("2026-03-16").monday == day("2026-03-16"))
        #expect(day("1969-12-31").isoWeekday == 3)
    }

    @Test func parsesTimesOfDay() {
        #expect(time("00:05").secondsSinceMidnight == 300)
        #expect(LocalTime("24:00") == nil)
        #expect(LocalTime("9:00") == nil)
    }
}

@Suite struct LocalCalendarTests {
    @Test func aUserWithNoTimeZoneIsInUTC() throws {
        #expect(calendar(nil).localDate(at: instant("2026-03-14T23:59:00Z")) == day("2026-03-14"))
        #expect(calendar("").timeZone.secondsFromGMT(for: instant("2026-07-01T00:00:00Z")) == 0)
    }

    @Test(arguments: [
        "Mars/Olympus", "Europe/Pariss", "GMT+5", "not a zone", "europe/paris", "posixrules", "localtime",
        "../../etc/passwd", "/usr/share/zoneinfo/UTC",
    ])
    func anUnknownTimeZoneIsAnError(_ zone: String) {
        #expect(throws: LocalCalendar.Failure.unknownTimeZone(zone)) { try LocalCalendar(identifier: zone) }
    }

    /// The time zone database's names without a slash are zones like any other, with their rules.
    @Test(arguments: [
        ("GMT", 0, 0), ("Zulu", 0, 0), ("UTC", 0, 0), ("CET", 1, 2), ("EST5EDT", -5, -4), ("EST", -5, -5),
        ("Japan", 9, 9), ("Singapore", 8, 8), ("US/Eastern", -5, -4), ("NZ-CHAT", 13.75, 12.75),
    ])
    func aTimeZoneDatabaseNameWithoutASlashIsAZone(_ zone: String, _ januaryHours: Double, _ julyHours: Double) throws {
        let calendar = try LocalCalendar(identifier: zone)
        #expect(Double(calendar.timeZone.secondsFromGMT(for: instant("2026-01-15T12:00:00Z"))) == januaryHours * 3600)
        #expect(Double(calendar.timeZone.secondsFromGMT(for: instant("2026-07-15T12:00:00Z"))) == julyHours * 3600)
    }

    @Test func newYorkSpringsForwardToA23HourDay() {
        let ny = calendar("America/New_York")
        #expect(ny.length(of: day("2026-03-08")) == 23 * 3600)
        #expect(ny.length(of: day("2026-03-07")) == 24 * 3600)
        #expect(ny.start(of: day("2026-03-08")) == instant("2026-03-08T05:00:00Z"))
        #expect(ny.start(of: day("2026-03-09")) == instant("2026-03-09T04:00:00Z"))
        // 02:30 does not exist that night; it is read as 03:30 EDT, as the clocks themselves jump.
        #expect(ny.instant(of: day("2026-03-08"), at: time("02:30")) == instant("2026-03-08T07:30:00Z"))
    }

    @Test func newYorkFallsBackToA25HourDay() {
        let ny = calendar("America/New_York")
        #expect(ny.length(of: day("2026-11-01")) == 25 * 3600)
        // 01:30 happens twice; it is its first occurrence (EDT).
        #expect(ny.instant(of: day("2026-11-01"), at: time("01:30")) == instant("2026-11-01T05:30:00Z"))
    }

    @Test func sydneyChangesTheOtherWayRound() {
        let sydney = calendar("Australia/Sydney")
        #expect(sydney.length(of: day("2026-04-05")) == 25 * 3600)   // autumn in April
        #expect(sydney.length(of: day("2026-10-04")) == 23 * 3600)   // spring in October
    }

    @Test func lordHoweShiftsByHalfAnHour() {
        let lordHowe = calendar("Australia/Lord_Howe")
        #expect(lordHowe.length(of: day("2026-04-05")) == 24.5 * 3600)
        #expect(lordHowe.length(of: day("2026-10-04")) == 23.5 * 3600)
        #expect(lordHowe.start(of: day("2026-06-01")) == instant("2026-05-31T13:30:00Z"))   // +10:30
    }

    @Test func quarterHourAndFarZones() {
        #expect(calendar("Asia/Kathmandu").start(of: day("2026-03-14")) == instant("2026-03-13T18:15:00Z"))
        #expect(calendar("Asia/Kolkata").start(of: day("2026-03-14")) == instant("2026-03-13T18:30:00Z"))
        #expect(calendar("Pacific/Chatham").start(of: day("2026-06-14")) == instant("2026-06-13T11:15:00Z"))   // +12:45
        #expect(calendar("Pacific/Kiritimati").start(of: day("2026-03-14")) == instant("2026-03-13T10:00:00Z"))   // +14
        #expect(calendar("Pacific/Pago_Pago").start(of: day("2026-03-14")) == instant("2026-03-14T11:00:00Z"))   // -11
        // At one instant, Kiritimati and Pago Pago are two calendar days apart.
        let now = instant("2026-03-14T10:30:00Z")
        #expect(calendar("Pacific/Kiritimati").localDate(at: now) == day("2026-03-15"))
        #expect(calendar("Pacific/Pago_Pago").localDate(at: now) == day("2026-03-13"))
    }

    @Test func theLatestDayWhoseMomentHasComeIsTodayOnlyOnceTheMomentPasses() {
        let paris = calendar("Europe/Paris")
        #expect(paris.latestDay(reaching: time("00:05"), atOrBefore: instant("2026-03-13T23:04:59Z")) == day("2026-03-13"))
        #expect(paris.latestDay(reaching: time("00:05"), atOrBefore: instant("2026-03-13T23:05:00Z")) == day("2026-03-14"))
    }

    @Test func knowsTheLocalMondayAndSundayEvening() {
        let paris = calendar("Europe/Paris")
        #expect(paris.isWeekday(7, atOrAfter: time("20:00"), at: instant("2026-03-22T19:00:00Z")))
        #expect(!paris.isWeekday(7, atOrAfter: time("20:00"), at: instant("2026-03-22T18:59:00Z")))
        #expect(paris.localDate(at: instant("2026-03-22T23:30:00Z")).isoWeekday == 1)
        #expect(paris.localTime(at: instant("2026-03-29T01:30:00Z")) == time("03:30"))   // after the 23-hour night
    }

    @Test func everyLocalDayStartsWhereThePreviousEnds() {
        let zones = [
            "America/New_York", "Europe/Paris", "Australia/Lord_Howe", "Asia/Kathmandu", "Pacific/Chatham",
            "America/Sao_Paulo", "Asia/Tehran", "America/St_Johns",
        ]
        for zone in zones {
            let cal = calendar(zone)
            var previousEnd: Date?
            for offset in 0..<400 {
                let date = day("2026-01-01").adding(days: offset)
                let start = cal.start(of: date)
                if let previousEnd { #expect(start == previousEnd, "\(zone) \(date)") }
                #expect(cal.localDate(at: start) == date, "\(zone) \(date)")
                #expect(cal.localDate(at: start.addingTimeInterval(-1)) == date.adding(days: -1), "\(zone) \(date)")
                previousEnd = cal.end(of: date)
            }
        }
    }
}
