import Foundation
import Testing

@testable import NudgeCore

private func instant(_ text: String) -> Date { ISO8601DateFormatter().date(from: text)! }
private func day(_ text: String) -> LocalDate { LocalDate(iso8601: text)! }
private func id(_ n: Int) -> UUID { UUID(uuidString: String(format: "00000000-0000-0000-0000-%012d", n))! }

private func circle(
    _ zone: String, challenge: FitCircleMembership.Challenge = .steps, starts: String = "2026-03-02",
    ends: String = "2026-04-26"
) -> CircleInTime {
    CircleInTime(
        circle: CircleRow(
            id: id(900), name: "Work Warriors", challenge: challenge, timezone: zone,
            startsOn: day(starts), endsOn: day(ends)),
        calendar: try! LocalCalendar(identifier: zone))
}

private func member(
    _ n: Int, start: Decimal? = nil, target: Decimal? = nil, joined: String = "2026-03-01T00:00:00Z",
    left: String? = nil
) -> CircleMember {
    CircleMember(
        userID: id(n), joinedAt: instant(joined), leftAt: left.map(instant), startingWeight: start, targetWeight: target,
        timezone: "Europe/Paris", locale: "en")
}

private func weighIn(_ date: String, _ weight: Decimal, at time: String) -> WeighIn {
    WeighIn(day: day(date), weight: weight, at: instant(time))
}

@Suite struct LeaderboardStandingsTests {
    private let steps = circle("Europe/Paris").circle
    private let weightLoss = circle("Europe/Paris", challenge: .weightLoss).circle

    @Test func tiesGoToWhoeverReachedTheValueFirst() {
        let members = [member(1), member(2), member(3), member(4)]
        let totals: [UUID: SubmittedTotals] = [
            id(1): SubmittedTotals(steps: 9000, stepsAt: instant("2026-03-10T18:00:00Z")),
            id(2): SubmittedTotals(steps: 9000, stepsAt: instant("2026-03-10T07:30:00Z")),
            id(3): SubmittedTotals(steps: 12000, stepsAt: instant("2026-03-10T21:00:00Z")),
            id(4): SubmittedTotals(steps: 8000, stepsAt: instant("2026-03-10T21:00:00Z")),
        ]
        let (standings, gaps) = LeaderboardStandings.rank(
            members: members, totals: totals, circle: steps,
            board: .of(.daily, containing: day("2026-03-10"), circle: steps),
            previousRanks: [id(1): 1, id(2): 2, id(4): 3])
        #expect(standings.map(\.userID) == [id(3), id(2), id(1), id(4)])
        #expect(standings.map(\.rank) == [1, 2, 3, 4])
        #expect(standings.map(\.value) == [12000, 9000, 9000, 8000])
        // Places gained since the previous period's final board; none for who had no rank there.
        #expect(standings.map(\.rankChange) == [nil, 0, -2, -1])
        #expect(gaps.isEmpty)
    }

    @Test func membersWithNothingSubmittedHoldNoPlaceAndNoChange() {
        let members = [member(1), member(2), member(3)]
        let board = Board.of(.weekly, containing: day("2026-03-10"), circle: steps)
        let nobody = LeaderboardStandings.rank(
            members: members, totals: [:], circle: steps, board: board,
            previousRanks: [id(1): 1, id(2): 2, id(3): 3]
        ).standings
        #expect(nobody.allSatisfy { $0.rank == nil && $0.rankChange == nil && $0.value == nil })
        #expect(LeaderboardStandings.placesHeld(nobody).isEmpty)
        let one = LeaderboardStandings.rank(
            members: members, totals: [id(3): .init(steps: 40, stepsAt: instant("2026-03-10T09:00:00Z"))],
            circle: steps, board: board, previousRanks: [id(3): 2]
        ).standings
        #expect(one.map(\.userID) == [id(3), id(1), id(2)])
        #expect(one.map(\.rank) == [1, nil, nil])
        #expect(one.map(\.rankChange) == [1, nil, nil])
        // No move is ever about a place without a value.
        #expect(LeaderboardMoves.moves(on: .weekly, before: [id(1): 5, id(3): 4], after: one).map(\.userID) == [id(3)])
    }

    @Test func equalValuesAndTimesFallBackToTheUserID() {
        let at = instant("2026-03-10T07:30:00Z")
        let (standings, _) = LeaderboardStandings.rank(
            members: [member(7), member(5)], totals: [id(7): .init(steps: 10, stepsAt: at), id(5): .init(steps: 10, stepsAt: at)],
            circle: steps, board: .of(.weekly, containing: day("2026-03-10"), circle: steps), previousRanks: nil)
        #expect(standings.map(\.userID) == [id(5), id(7)])
        #expect(standings.allSatisfy { $0.rankChange == nil })
    }

    @Test func aTargetNotBelowTheStartGetsNoPercentageAndNoPlace() {
        let members = [
            member(1, start: 80, target: 80), member(2, start: 90, target: 80), member(3, start: 100, target: 90),
            member(4, start: 70, target: 75), member(5),
        ]
        let totals: [UUID: SubmittedTotals] = [
            id(1): .init(weighIns: [weighIn("2026-03-10", 75, at: "2026-03-10T07:00:00Z")]),
            id(2): .init(weighIns: [weighIn("2026-03-10", 87, at: "2026-03-10T08:00:00Z")]),
            id(3): .init(weighIns: [weighIn("2026-03-10", 96.25, at: "2026-03-10T09:00:00Z")]),
            id(4): .init(weighIns: [weighIn("2026-03-10", 69, at: "2026-03-10T09:00:00Z")]),
        ]
        let (standings, gaps) = LeaderboardStandings.rank(
            members: members, totals: totals, circle: weightLoss,
            board: .of(.daily, containing: day("2026-03-10"), circle: weightLoss),
            previousRanks: nil)
        // (90 − 87) / (90 − 80) = 30 %, (100 − 96.25) / 10 = 37.5 %.
        #expect(standings.map(\.userID) == [id(3), id(2), id(1), id(4), id(5)])
        #expect(standings.map(\.value) == [37.5, 30, nil, nil, nil])
        #expect(standings.map(\.rank) == [1, 2, nil, nil, nil])
        #expect(standings.allSatisfy { $0.metricType == "weight_loss_pct" })
        #expect(gaps.map(\.0) == [id(1), id(4), id(5)])
        #expect(gaps.map(\.1) == [.targetNotBelowStart, .targetNotBelowStart, .noGoal])
    }

    @Test func aDailyWeightBoardPlacesOnlyWhoWeighedInThatDay() {
        // Weigh-ins on Mondays, and member 3 on Wednesday too: Monday's board ranks 1 and 2 by the
        // percentage of their goal; on Wednesday's, Monday's weights carried forward are no place,
        // and only 3 holds one.
        let members = [member(1, start: 90, target: 80), member(2, start: 100, target: 90), member(3, start: 95, target: 85)]
        let totals: [UUID: SubmittedTotals] = [
            id(1): .init(weighIns: [
                weighIn("2026-03-02", 89, at: "2026-03-02T07:00:00Z"),
                weighIn("2026-03-09", 88, at: "2026-03-09T07:00:00Z"),
            ]),
            id(2): .init(weighIns: [weighIn("2026-03-09", 97, at: "2026-03-09T06:00:00Z")]),
            id(3): .init(weighIns: [
                weighIn("2026-03-09", 95, at: "2026-03-09T06:30:00Z"),
                weighIn("2026-03-11", 94.5, at: "2026-03-11T06:30:00Z"),
            ]),
        ]
        func board(_ date: String) -> [Standing] {
            LeaderboardStandings.rank(
                members: members, totals: totals, circle: weightLoss,
                board: .of(.daily, containing: day(date), circle: weightLoss), previousRanks: nil
            ).standings
        }
        let monday = board("2026-03-09")
        #expect(monday.map(\.userID) == [id(2), id(1), id(3)])
        #expect(monday.map(\.value) == [30, 20, 0])
        #expect(monday.map(\.rank) == [1, 2, 3])
        let wednesday = board("2026-03-11")
        #expect(wednesday.map(\.userID) == [id(3), id(1), id(2)])
        #expect(wednesday.map(\.value) == [5, nil, nil])
        #expect(wednesday.map(\.rank) == [1, nil, nil])
        #expect(wednesday.map(\.achievedAt) == [instant("2026-03-11T06:30:00Z"), nil, nil])
    }

    @Test func theWeeklyBoardIsThePercentageOfTheWeeksGoal() {
        // The challenge runs 2026-03-02 to 2026-04-26: from Monday 9 March, 7 weeks remain, so a
        // member going from 90 to 80 has a week's goal of 10/7 kg.
        let members = [member(1, start: 90, target: 80), member(2, start: 90, target: 83), member(3, start: 90, target: 80)]
        let totals: [UUID: SubmittedTotals] = [
            // 89 before the week, 88 in it: 1 kg of 10/7 = 70 %.
            id(1): .init(weighIns: [
                weighIn("2026-03-02", 89, at: "2026-03-02T07:00:00Z"),
                weighIn("2026-03-10", 88, at: "2026-03-10T07:00:00Z"),
            ]),
            // No weight before the week: from the starting 90 to 89.5, 0.5 kg of 7/7 = 50 %.
            id(2): .init(weighIns: [weighIn("2026-03-11", 89.5, at: "2026-03-11T07:00:00Z")]),
            // Weighed last week, and again this week at the same weight: nothing lost, a place.
            id(3): .init(weighIns: [
                weighIn("2026-03-03", 87, at: "2026-03-03T07:00:00Z"),
                weighIn("2026-03-12", 87, at: "2026-03-12T07:00:00Z"),
            ]),
        ]
        let week = LeaderboardStandings.rank(
            members: members, totals: totals, circle: weightLoss,
            board: .of(.weekly, containing: day("2026-03-12"), circle: weightLoss),
            previousRanks: nil
        ).standings
        #expect(week.map(\.userID) == [id(1), id(2), id(3)])
        #expect(week.map(\.value) == [70, 50, 0])
        #expect(week.map(\.rank) == [1, 2, 3])
    }

    @Test func aWeeklyWeightBoardPlacesOnlyWhoWeighedInThatWeekAndTellsNoDropFromNoPlace() {
        // Members 1–3 weighed in last week only, 1 first; 4–6 weigh in this week. Last week's weights
        // carried forward would have held places 1–3 at 0 % (by how long ago they were weighed) and
        // "dropped" to 4–6 when the others weighed in.
        let members = (1...6).map { member($0, start: 90, target: 80) }
        var totals: [UUID: SubmittedTotals] = [:]
        for n in 1...6 {
            totals[id(n)] = .init(weighIns: [weighIn("2026-03-03", 89, at: "2026-03-03T07:0\(n):00Z")])
        }
        let week = Board.of(.weekly, containing: day("2026-03-11"), circle: weightLoss)
        let before = LeaderboardStandings.rank(
            members: members, totals: totals, circle: weightLoss, board: week,
            previousRanks: nil
        ).standings
        #expect(before.allSatisfy { $0.rank == nil && $0.value == nil && $0.achievedAt == nil })
        for n in 4...6 {
            totals[id(n)]!.weighIns.append(weighIn("2026-03-11", Decimal(n - 4) / 2 + 87.5, at: "2026-03-11T07:0\(n):00Z"))
        }
        let after = LeaderboardStandings.rank(
            members: members, totals: totals, circle: weightLoss, board: week,
            previousRanks: [id(1): 1, id(2): 2, id(3): 3, id(4): 4, id(5): 5, id(6): 6]
        ).standings
        #expect(after.map(\.userID) == [id(4), id(5), id(6), id(1), id(2), id(3)])
        #expect(after.map(\.rank) == [1, 2, 3, nil, nil, nil])
        // Changes only between places held: 4–6 each climbed three from last week's board.
        #expect(after.map(\.rankChange) == [3, 3, 3, nil, nil, nil])
        // Ranks an earlier version stored for 1–3 with last week's weight: no drop is told from them.
        #expect(LeaderboardMoves.moves(on: .weekly, before: [id(1): 1, id(2): 2, id(3): 3], after: after).isEmpty)
    }

    @Test func aReweighAtTheSameValueKeepsTheEarlierTime() {
        let members = [member(1, start: 90, target: 80), member(2, start: 90, target: 80)]
        let totals: [UUID: SubmittedTotals] = [
            // Reached 85 on Monday, weighed 85 again on Wednesday.
            id(1): .init(weighIns: [
                weighIn("2026-03-09", 85, at: "2026-03-09T07:00:00Z"),
                weighIn("2026-03-11", 85, at: "2026-03-11T07:00:00Z"),
            ]),
            // Reached 85 on Tuesday, weighed 85 again on Wednesday, before 1 did.
            id(2): .init(weighIns: [
                weighIn("2026-03-08", 86, at: "2026-03-08T07:00:00Z"),
                weighIn("2026-03-10", 85, at: "2026-03-10T07:00:00Z"),
                weighIn("2026-03-11", 85, at: "2026-03-11T06:00:00Z"),
            ]),
        ]
        let daily = LeaderboardStandings.rank(
            members: members, totals: totals, circle: weightLoss,
            board: .of(.daily, containing: day("2026-03-11"), circle: weightLoss),
            previousRanks: nil
        ).standings
        #expect(daily.map(\.userID) == [id(1), id(2)])
        #expect(daily.map(\.achievedAt) == [instant("2026-03-09T07:00:00Z"), instant("2026-03-10T07:00:00Z")])
    }

    @Test func monthlyAndAllTimeWeightBoardsRankByTheWeightLost() {
        let members = [member(1, start: 80, target: 80), member(2, start: 90, target: 80)]
        let totals: [UUID: SubmittedTotals] = [
            id(1): .init(weighIns: [
                weighIn("2026-03-02", 78, at: "2026-03-02T07:00:00Z"),
                weighIn("2026-04-10", 76.5, at: "2026-04-10T07:00:00Z"),
            ]),
            id(2): .init(weighIns: [weighIn("2026-04-10", 88, at: "2026-04-10T08:00:00Z")]),
        ]
        let april = Board.of(.monthly, containing: day("2026-04-12"), circle: weightLoss)
        let monthly = LeaderboardStandings.rank(
            members: members, totals: totals, circle: weightLoss, board: april,
            previousRanks: nil
        ).standings
        // This month: 78 → 76.5 and (no weight before the month) 90 → 88.
        #expect(monthly.map(\.value) == [2, 1.5])
        #expect(monthly.map(\.metricType) == ["weight_lost", "weight_lost"])
        let allTime = LeaderboardStandings.rank(
            members: members, totals: totals, circle: weightLoss,
            board: .of(.allTime, containing: day("2026-04-12"), circle: weightLoss),
            previousRanks: nil
        ).standings
        #expect(allTime.map(\.userID) == [id(1), id(2)])
        #expect(allTime.map(\.value) == [3.5, 2])
    }

    @Test func monthlyAndAllTimeWeightBoardsPlaceOnlyWhoWeighedInWithinThem() {
        // Member 1 weighed in in March only; 2 in March and April.
        let members = [member(1, start: 90, target: 80), member(2, start: 90, target: 80)]
        let totals: [UUID: SubmittedTotals] = [
            id(1): .init(weighIns: [weighIn("2026-03-20", 85, at: "2026-03-20T07:00:00Z")]),
            id(2): .init(weighIns: [
                weighIn("2026-03-20", 89, at: "2026-03-20T07:00:00Z"),
                weighIn("2026-04-02", 88.5, at: "2026-04-02T07:00:00Z"),
            ]),
        ]
        // April's board: March's 85 carried forward is no value of April's; 2 lost 0.5 in it.
        let april = LeaderboardStandings.rank(
            members: members, totals: totals, circle: weightLoss,
            board: .of(.monthly, containing: day("2026-04-12"), circle: weightLoss),
            previousRanks: nil
        ).standings
        #expect(april.map(\.userID) == [id(2), id(1)])
        #expect(april.map(\.value) == [0.5, nil])
        #expect(april.map(\.rank) == [1, nil])
        // The all-time board's period is the challenge: both weighed in within it.
        let allTime = LeaderboardStandings.rank(
            members: members, totals: totals, circle: weightLoss,
            board: .of(.allTime, containing: day("2026-04-12"), circle: weightLoss),
            previousRanks: nil
        ).standings
        #expect(allTime.map(\.userID) == [id(1), id(2)])
        #expect(allTime.map(\.value) == [5, 1.5])
        #expect(allTime.map(\.rank) == [1, 2])
        // A weigh-in before the challenge's first day is none of its days: no place.
        let early = SubmittedTotals(weighIns: [weighIn("2026-03-01", 85, at: "2026-03-01T07:00:00Z")])
        let none = LeaderboardStandings.rank(
            members: [member(1, start: 90, target: 80)], totals: [id(1): early], circle: weightLoss,
            board: .of(.allTime, containing: day("2026-03-10"), circle: weightLoss),
            previousRanks: nil
        ).standings
        #expect(none.map(\.rank) == [nil])
    }

    @Test func percentagesRoundHalfAwayFromZeroLikePostgreSQL() {
        #expect(LeaderboardStandings.rounded(Decimal(string: "12.345")!, scale: 2) == Decimal(string: "12.35")!)
        #expect(LeaderboardStandings.rounded(Decimal(string: "-12.345")!, scale: 2) == Decimal(string: "-12.35")!)
        #expect(LeaderboardStandings.rounded(Decimal(100) / Decimal(3), scale: 2) == Decimal(string: "33.33")!)
    }

    @Test func theRosterIsWhoHadJoinedAndNotLeftAtTheInstant() {
        let leaver = member(1, joined: "2026-03-11T15:00:00Z", left: "2026-03-13T09:00:00Z")
        #expect(!leaver.isOnRoster(at: instant("2026-03-11T14:59:59Z")))
        #expect(leaver.isOnRoster(at: instant("2026-03-11T15:00:00Z")))
        #expect(leaver.isOnRoster(at: instant("2026-03-13T08:59:59Z")))
        #expect(!leaver.isOnRoster(at: instant("2026-03-13T09:00:00Z")))
    }
}

@Suite struct LeaderboardCadenceTests {
    private func due(
        _ circle: CircleInTime, at now: String, checked: [Board: String] = [:], final: Set<Board> = [],
        window: DayWindow? = nil
    ) -> [String] {
        let states = Dictionary(
            uniqueKeysWithValues: Set(checked.keys).union(final).map { board in
                (board, BoardState(inputs: "", checkedAt: checked[board].map(instant) ?? .distantPast, isFinal: final.contains(board)))
            })
        return LeaderboardCadence.due(for: circle, now: instant(now), window: window, states: states)
            .map { "\($0.board) \($0.reason.rawValue)" }
    }

    @Test func periodsResetAtMidnightOnMondayAndOnTheFirst() {
        let row = circle("UTC").circle
        #expect(Board.of(.weekly, containing: day("2026-03-08"), circle: row) == Board(period: .weekly, start: day("2026-03-02"), next: day("2026-03-09")))
        #expect(Board.of(.monthly, containing: day("2026-12-31"), circle: row) == Board(period: .monthly, start: day("2026-12-01"), next: day("2027-01-01")))
        #expect(
            Board.of(.monthly, containing: day("2027-01-15"), circle: row).previous
                == Board(period: .monthly, start: day("2026-12-01"), next: day("2027-01-01")))
        #expect(Board.of(.allTime, containing: day("2026-03-10"), circle: row) == Board(period: .allTime, start: day("2026-03-02"), next: day("2026-04-27")))
        #expect(Board.of(.allTime, containing: day("2026-03-10"), circle: row).previous == nil)
        // Only the challenge's days count: a week that begins before it counts from its start.
        #expect(
            Board.of(.weekly, containing: day("2026-03-02"), circle: circle("UTC", starts: "2026-03-04").circle)
                .countedDays(in: circle("UTC", starts: "2026-03-04").circle) == day("2026-03-04")...day("2026-03-08"))
    }

    @Test func aFreshCircleHasEveryBoardDueAndThePreviousPeriodsFinal() {
        // Tuesday 10 March, 12:00 in Paris: last week and yesterday are over.
        #expect(
            due(circle("Europe/Paris"), at: "2026-03-10T11:00:00Z") == [
                "daily 2026-03-09 final", "daily 2026-03-10 cadence", "weekly 2026-03-02 final", "weekly 2026-03-09 cadence",
                "monthly 2026-03-01 cadence", "all_time 2026-03-02 cadence",
            ])
    }

    @Test func dailyBoardsEveryFiveMinutesByDayAndHourlyOvernight() {
        let paris = circle("Europe/Paris")
        let today = Board.of(.daily, containing: day("2026-03-10"), circle: paris.circle)
        let week = Board.of(.weekly, containing: day("2026-03-10"), circle: paris.circle)
        let yesterday = Board.of(.daily, containing: day("2026-03-09"), circle: paris.circle)
        let lastWeek = Board.of(.weekly, containing: day("2026-03-02"), circle: paris.circle)
        let month = Board.of(.monthly, containing: day("2026-03-10"), circle: paris.circle)
        let allTime = Board.of(.allTime, containing: day("2026-03-10"), circle: paris.circle)
        let settled: Set<Board> = [yesterday, lastWeek]
        // 12:02 Paris, everything checked at 12:00: nothing is due until 12:05.
        var checked = [
            today: "2026-03-10T11:00:00Z", week: "2026-03-10T11:00:00Z", month: "2026-03-09T23:30:00Z",
            allTime: "2026-03-09T23:30:00Z",
        ]
        #expect(due(paris, at: "2026-03-10T11:02:00Z", checked: checked, final: settled).isEmpty)
        #expect(due(paris, at: "2026-03-10T11:05:00Z", checked: checked, final: settled) == ["daily 2026-03-10 cadence"])
        #expect(
            due(paris, at: "2026-03-10T12:00:00Z", checked: checked, final: settled)
                == ["daily 2026-03-10 cadence", "weekly 2026-03-09 cadence"])
        // 23:10 Paris: hourly; checked at 23:00, not due again before midnight.
        checked[today] = "2026-03-10T22:00:00Z"
        checked[week] = "2026-03-10T22:00:00Z"
        #expect(due(paris, at: "2026-03-10T22:10:00Z", checked: checked, final: settled).isEmpty)
        #expect(due(paris, at: "2026-03-10T22:55:00Z", checked: checked, final: settled).isEmpty)
        // 05:30 and 06:00 the next morning: one hourly slot, then five-minute ones.
        let tomorrow = Board.of(.daily, containing: day("2026-03-11"), circle: paris.circle)
        let morning = [
            tomorrow: "2026-03-11T04:00:00Z", week: "2026-03-11T04:00:00Z", month: "2026-03-10T23:30:00Z",
            allTime: "2026-03-10T23:30:00Z",
        ]
        #expect(due(paris, at: "2026-03-11T04:55:00Z", checked: morning, final: settled.union([today])).isEmpty)
        #expect(
            due(paris, at: "2026-03-11T05:00:00Z", checked: morning, final: settled.union([today]))
                == ["daily 2026-03-11 cadence", "weekly 2026-03-09 cadence"])
    }

    @Test func aPeriodsFinalRefreshWaitsForTheLateSubmissionsGrace() {
        // Pacific/Kiritimati (UTC+14): 10 March ends at 10:00 UTC.
        let kiritimati = circle("Pacific/Kiritimati")
        let tenth = Board.of(.daily, containing: day("2026-03-10"), circle: kiritimati.circle)
        let eleventh = Board.of(.daily, containing: day("2026-03-11"), circle: kiritimati.circle)
        let others = [
            Board.of(.weekly, containing: day("2026-03-10"), circle: kiritimati.circle),
            Board.of(.monthly, containing: day("2026-03-10"), circle: kiritimati.circle),
            Board.of(.allTime, containing: day("2026-03-10"), circle: kiritimati.circle),
        ]
        let checked = Dictionary(uniqueKeysWithValues: ([tenth] + others).map { ($0, "2026-03-10T09:55:00Z") })
        let lastWeek = Board.of(.weekly, containing: day("2026-03-02"), circle: kiritimati.circle)
        let ninth = Board.of(.daily, containing: day("2026-03-09"), circle: kiritimati.circle)
        // 23:58 local: the 10th's board is current; 00:10: the 11th's begins, the 10th waits; 00:30:
        // the 10th's final refresh, and the month's and all-time's daily one (after the grace).
        #expect(due(kiritimati, at: "2026-03-10T09:58:00Z", checked: checked, final: [lastWeek, ninth]).isEmpty)
        #expect(
            due(kiritimati, at: "2026-03-10T10:10:00Z", checked: checked, final: [lastWeek, ninth])
                == ["daily 2026-03-11 cadence", "weekly 2026-03-09 cadence"])
        var later = checked
        for board in [eleventh, others[0]] { later[board] = "2026-03-10T10:10:00Z" }
        // (Overnight the 11th's board is hourly: checked at 00:10, it is not due at 00:30.)
        #expect(
            due(kiritimati, at: "2026-03-10T10:30:00Z", checked: later, final: [lastWeek, ninth])
                == ["daily 2026-03-10 final", "monthly 2026-03-01 cadence", "all_time 2026-03-02 cadence"])
        for board in others.dropFirst() { later[board] = "2026-03-10T10:30:00Z" }
        // Once final, only a backfill recomputes it.
        #expect(due(kiritimati, at: "2026-03-10T10:35:00Z", checked: later, final: [lastWeek, ninth, tenth]).isEmpty)
        #expect(
            due(kiritimati, at: "2026-03-10T11:00:00Z", checked: later, final: [lastWeek, ninth, tenth])
                == ["daily 2026-03-11 cadence", "weekly 2026-03-09 cadence"])
        #expect(
            due(
                kiritimati, at: "2026-03-10T10:35:00Z", checked: later, final: [lastWeek, ninth, tenth],
                window: try! DayWindow(from: day("2026-03-10"), to: day("2026-03-10")))
                == ["daily 2026-03-10 backfill", "weekly 2026-03-09 backfill", "monthly 2026-03-01 backfill", "all_time 2026-03-02 backfill"])
    }

    @Test func aBoardStaysProvisionalUntilEveryMembersDayHasEnded() {
        // A Paris circle (UTC+1 in March) with a member in Los Angeles (UTC−7 from 8 March): her
        // Sunday the 15th ends at 07:00 UTC on Monday, eight hours after the circle's.
        let paris = circle("Europe/Paris")
        let losAngeles = try! LocalCalendar(identifier: "America/Los_Angeles")
        let tokyo = try! LocalCalendar(identifier: "Asia/Tokyo")
        let sunday = Board.of(.daily, containing: day("2026-03-15"), circle: paris.circle)
        let week = Board.of(.weekly, containing: day("2026-03-15"), circle: paris.circle)
        func due(_ now: String, members: [LocalCalendar]) -> [DueBoard] {
            let looked = BoardState(inputs: "", checkedAt: instant("2026-03-15T22:55:00Z"), isFinal: false)
            return LeaderboardCadence.due(
                for: paris, now: instant(now), window: nil, states: [sunday: looked, week: looked],
                members: members
            )
            .filter { [sunday, week].contains($0.board) }
        }
        func names(_ boards: [DueBoard]) -> [String] { boards.map { "\($0.board) \($0.reason.rawValue)" } }
        let final = ["daily 2026-03-15 final", "weekly 2026-03-09 final"]
        #expect(names(due("2026-03-15T23:40:00Z", members: [])) == final)
        #expect(names(due("2026-03-15T23:40:00Z", members: [tokyo])) == final)
        // 20:00 Sunday in Los Angeles: both boards are still provisional, refreshed hourly, and
        // stand with the circle's roster of Sunday's end.
        let evening = due("2026-03-16T03:00:00Z", members: [losAngeles, tokyo])
        #expect(names(evening) == ["daily 2026-03-15 cadence", "weekly 2026-03-09 cadence"])
        #expect(evening.allSatisfy { !$0.isFinal && $0.standsAt == instant("2026-03-15T23:00:00Z") })
        // Her midnight: the grace for late submissions, then the final refresh.
        #expect(due("2026-03-16T07:10:00Z", members: [losAngeles]).isEmpty)
        #expect(names(due("2026-03-16T07:30:00Z", members: [losAngeles])) == final)
        #expect(
            LeaderboardCadence.lastEnd(of: day("2026-03-15"), circle: paris.calendar, members: [losAngeles, tokyo])
                == instant("2026-03-16T07:00:00Z"))
        // The month's and all-time boards' daily refresh waits for her Sunday too.
        #expect(
            LeaderboardCadence.slotStart(
                .monthly, at: instant("2026-03-16T03:00:00Z"), calendar: paris.calendar,
                members: [losAngeles]) == instant("2026-03-15T07:30:00Z"))
        #expect(
            LeaderboardCadence.slotStart(
                .allTime, at: instant("2026-03-16T07:30:00Z"), calendar: paris.calendar,
                members: [losAngeles]) == instant("2026-03-16T07:30:00Z"))
    }

    @Test func newfoundlandsShortDayHasItsSlotsAndItsMidnight() {
        // America/St_Johns springs forward at 02:00 on 8 March 2026 (−3:30 to −2:30): a 23-hour day.
        let stJohns = circle("America/St_Johns")
        let calendar = stJohns.calendar
        #expect(calendar.length(of: day("2026-03-08")) == 23 * 3600)
        // 01:50 local (05:20 UTC) is in the 01:00 hourly slot; 03:10 local (05:40 UTC) in the 03:00 one.
        #expect(LeaderboardCadence.slotStart(.daily, at: instant("2026-03-08T05:20:00Z"), calendar: calendar) == instant("2026-03-08T04:30:00Z"))
        #expect(LeaderboardCadence.slotStart(.daily, at: instant("2026-03-08T05:40:00Z"), calendar: calendar) == instant("2026-03-08T05:30:00Z"))
        // The 8th ends at 02:30 UTC on the 9th; its final refresh comes at 00:30 local, 03:00 UTC.
        let eighth = Board.of(.daily, containing: day("2026-03-08"), circle: stJohns.circle)
        let finals = { (now: String) in
            LeaderboardCadence.due(for: stJohns, now: instant(now), window: nil, states: [:])
                .filter { $0.board == eighth }.map(\.reason)
        }
        #expect(finals("2026-03-09T02:20:00Z") == [.cadence])
        #expect(finals("2026-03-09T02:59:00Z").isEmpty)
        #expect(finals("2026-03-09T03:00:00Z") == [.final])
        let final = LeaderboardCadence.due(for: stJohns, now: instant("2026-03-09T03:00:00Z"), window: nil, states: [:])
            .first { $0.board == eighth }
        #expect(final?.standsAt == instant("2026-03-09T02:30:00Z"))
    }

    @Test func afterAnOutageTheUnfinishedBoardsAreFinishedUpToAWeekBack() {
        let paris = circle("Europe/Paris")
        // The last final daily board is the 3rd's, the last final week the one of 23 February; at
        // noon on the 10th, the 4th to the 9th are due final, and the week of the 2nd.
        let lastFinal: [LeaderboardPeriod: LocalDate] = [
            .daily: day("2026-03-03"), .weekly: day("2026-02-23"),
            .monthly: day("2026-02-01"),
        ]
        let third = Board.of(.daily, containing: day("2026-03-03"), circle: paris.circle)
        let boards = LeaderboardCadence.due(
            for: paris, now: instant("2026-03-10T11:00:00Z"), window: nil,
            states: [third: BoardState(inputs: "", checkedAt: .distantPast, isFinal: true)],
            lastFinal: lastFinal)
        #expect(
            boards.filter { $0.isFinal }.map(\.board.description) == [
                "daily 2026-03-04", "daily 2026-03-05", "daily 2026-03-06", "daily 2026-03-07", "daily 2026-03-08",
                "daily 2026-03-09", "weekly 2026-03-02",
            ])
        // At most a week back: older days take a backfill.
        let longAgo = LeaderboardCadence.candidates(
            for: paris, now: instant("2026-03-30T11:00:00Z"), window: nil,
            lastFinal: [.daily: day("2026-03-03")])
        #expect(
            longAgo.filter { $0.period == .daily }.map(\.start.description)
                == ["2026-03-23", "2026-03-24", "2026-03-25", "2026-03-26", "2026-03-27", "2026-03-28", "2026-03-29", "2026-03-30"])
    }

    @Test func monthlyAndAllTimeBoardsWaitForTheGraceAndUnchangedDailyLooksByDayAreNotWritten() {
        let paris = circle("Europe/Paris")
        #expect(
            LeaderboardCadence.slotStart(.monthly, at: instant("2026-03-10T23:10:00Z"), calendar: paris.calendar)
                == instant("2026-03-09T23:30:00Z"))
        #expect(
            LeaderboardCadence.slotStart(.allTime, at: instant("2026-03-10T23:30:00Z"), calendar: paris.calendar)
                == instant("2026-03-10T23:30:00Z"))
        let today = DueBoard(
            board: Board.of(.daily, containing: day("2026-03-10"), circle: paris.circle), reason: .cadence,
            standsAt: instant("2026-03-10T11:00:00Z"), isFinal: false)
        #expect(!LeaderboardCadence.remembersLook(at: today, now: instant("2026-03-10T11:00:00Z"), calendar: paris.calendar))
        #expect(LeaderboardCadence.remembersLook(at: today, now: instant("2026-03-10T22:10:00Z"), calendar: paris.calendar))
    }

    @Test func anEndedCircleFinishesItsBoardsAndStops() {
        let ended = circle("UTC", starts: "2026-03-02", ends: "2026-03-11")
        let week = Board.of(.weekly, containing: day("2026-03-11"), circle: ended.circle)
        // Thursday the 12th at 01:00: the 11th, the week (counted to the 11th) and all-time are final.
        #expect(
            due(
                ended, at: "2026-03-12T01:00:00Z",
                final: [
                    Board.of(.daily, containing: day("2026-03-10"), circle: ended.circle),
                    Board.of(.weekly, containing: day("2026-03-02"), circle: ended.circle),
                ])
                == ["daily 2026-03-11 final", "weekly 2026-03-09 final", "monthly 2026-03-01 final", "all_time 2026-03-02 final"])
        #expect(week.countedDays(in: ended.circle) == day("2026-03-09")...day("2026-03-11"))
    }
}

@Suite struct LeaderboardMovesTests {
    @Test func movesOfThreePlacesOrMoreOnDailyAndWeeklyBoards() {
        let after = [1, 2, 3, 4, 5].map { Standing(userID: id($0), metricType: "steps", value: 0, achievedAt: nil, rank: $0, rankChange: nil) }
        let before = [id(1): 4, id(2): 2, id(3): 1, id(5): 2]
        #expect(LeaderboardMoves.moves(on: .daily, before: before, after: after).map(\.userID) == [id(1), id(5)])
        #expect(LeaderboardMoves.moves(on: .weekly, before: before, after: after).map(\.places) == [3, -3])
        #expect(LeaderboardMoves.moves(on: .monthly, before: before, after: after).isEmpty)
    }

    @Test func atMostOneAnHourAndThreeALocalDay() {
        let now = instant("2026-03-10T15:00:00Z")
        let today = day("2026-03-10")
        #expect(LeaderboardMoves.allowed(now: now, today: today, sent: []))
        #expect(!LeaderboardMoves.allowed(now: now, today: today, sent: [.init(localDay: today, deliverAfter: instant("2026-03-10T14:01:00Z"))]))
        #expect(LeaderboardMoves.allowed(now: now, today: today, sent: [.init(localDay: today, deliverAfter: instant("2026-03-10T14:00:00Z"))]))
        let three = ["08", "10", "12"].map { LeaderboardMoves.Sent(localDay: today, deliverAfter: instant("2026-03-10T\($0):00:00Z")) }
        #expect(!LeaderboardMoves.allowed(now: now, today: today, sent: three))
        #expect(LeaderboardMoves.allowed(now: now, today: today.adding(days: 1), sent: three))
    }

    @Test func theSeedsCopyInEnglishAndFrench() {
        let up = LeaderboardMoves.Move(userID: id(1), period: .daily, from: 6, to: 3)
        let down = LeaderboardMoves.Move(userID: id(1), period: .weekly, from: 2, to: 6)
        let top = LeaderboardMoves.Move(userID: id(1), period: .daily, from: 4, to: 1)
        #expect(
            LeaderboardMoves.body(up, circle: "Work Warriors", locale: "en")
                == "📈 You moved up to #3 on today's board in 'Work Warriors'! Can you reach #2?")
        // The place to win back is the one lost, not the one above.
        #expect(
            LeaderboardMoves.body(down, circle: "Work Warriors", locale: "en")
                == "📉 You dropped to #6 on this week's board in 'Work Warriors'. Time to win back #2!")
        let fall = LeaderboardMoves.Move(userID: id(1), period: .daily, from: 1, to: 4)
        #expect(
            LeaderboardMoves.body(fall, circle: "Work Warriors", locale: "en")
                == "📉 You dropped to #4 on today's board in 'Work Warriors'. Time to win back #1!")
        #expect(
            LeaderboardMoves.body(top, circle: "Work Warriors", locale: "en")
                == "📈 You moved up to #1 on today's board in 'Work Warriors'! Can you stay on top?")
        #expect(
            LeaderboardMoves.body(up, circle: "Work Warriors", locale: "fr")
                == "📈 Te voilà #3 au classement du jour dans « Work Warriors » ! Peux-tu décrocher la #2 ?")
        #expect(
            LeaderboardMoves.body(down, circle: "Work Warriors", locale: "fr")
                == "📉 Te voilà #6 au classement de la semaine dans « Work Warriors ». À toi de reprendre la #2 !")
        let payload = LeaderboardMoves.payload(up, circleID: id(900))
        #expect(payload.contains(#""deep_link":"fitcircle://circles/00000000-0000-0000-0000-000000000900/leaderboard?period=daily""#))
    }
}
