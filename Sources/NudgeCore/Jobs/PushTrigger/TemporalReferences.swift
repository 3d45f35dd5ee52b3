import Foundation

/// When an event a user mentioned takes place, in their local calendar.
public enum EventTime: Sendable, Equatable, CustomStringConvertible {
    /// Some time on that day ("tomorrow", "Feb 20", "this Thursday").
    case day(LocalDate)
    /// That day's evening ("tonight", "tomorrow night").
    case evening(LocalDate)
    /// Some day of the week starting that Monday ("next week").
    case week(LocalDate)

    /// The instants the event may fall in.
    public func interval(in calendar: LocalCalendar) -> Range<Date> {
        switch self {
        case .day(let day): calendar.start(of: day)..<calendar.end(of: day)
        case .evening(let day): calendar.instant(of: day, at: Self.evening)..<calendar.end(of: day)
        case .week(let monday): calendar.start(of: monday)..<calendar.end(of: monday.adding(days: 6))
        }
    }

    public var description: String {
        switch self {
        case .day(let day): "\(day)"
        case .evening(let day): "\(day) evening"
        case .week(let monday): "week of \(monday)"
        }
    }

    static let evening = LocalTime(hour: 18, minute: 0)!
}

/// An upcoming event found in one of the user's messages (docs/jobs/push-trigger.md, "What to say").
public struct TemporalReference: Sendable, Equatable {
    /// What kind of event ("presentation", "interview"): a category word, never the user's sentence
    /// or a person's name, so that it may go into `push_log.metadata`.
    public let eventDescription: String?
    public let when: EventTime
    /// How sure the reading is; only 0.7 and above can trigger a push.
    public let confidence: Double
    public let sourceMessageCreatedAt: Date
}

/// Finds dates and events in a message, resolved against the message's own `created_at` in the
/// user's time zone (not the time of the run), in English and French: relative days ("tomorrow",
/// "in two days", "tonight"), weekdays ("this Thursday" the nearest, "next Thursday" the one in the
/// following week, "on Thursday" the next one after the message's day), explicit dates ("Feb 20",
/// "2/20", "the 15th", the next occurrence when there is no year) and "next week".
public enum TemporalReferences {
    public static func extract(
        from text: String, sentAt: Date, calendar: LocalCalendar,
        locale: String
    ) -> [TemporalReference] {
        let messageDay = calendar.localDate(at: sentAt)
        var references: [TemporalReference] = []
        for sentence in sentences(of: text) {
            let words = self.words(of: sentence)
            let vocabulary = locale == "fr" ? frenchEventWords : englishEventWords
            let event = words.lazy.compactMap { vocabulary[elided($0)] }.first
            var index = 0
            while index < words.count {
                guard let (time, length, certainty) = when(words, at: index, messageDay: messageDay, dayFirst: locale == "fr") else {
                    index += 1
                    continue
                }
                let confidence: Double = event == nil ? min(certainty, 0.5) : certainty
                references.append(
                    TemporalReference(
                        eventDescription: event, when: time, confidence: confidence,
                        sourceMessageCreatedAt: sentAt))
                index += length
            }
        }
        return references
    }

    // MARK: Date phrases

    /// The date phrase starting at `index`: when it means, how many words it spans, and how sure
    /// the reading is.
    private static func when(
        _ words: [String], at index: Int, messageDay: LocalDate,
        dayFirst: Bool
    ) -> (EventTime, Int, Double)? {
        let word = words[index]
        let previous = index > 0 ? words[index - 1] : ""
        let next = index + 1 < words.count ? words[index + 1] : ""
        let afterNext = index + 2 < words.count ? words[index + 2] : ""

        switch word {
        case "tonight": return (.evening(messageDay), 1, 0.9)
        case "today", "aujourd'hui": return (.day(messageDay), 1, 0.85)
        case "tomorrow", "demain":
            let evening = ["night", "evening", "soir"].contains(next)
            return (evening ? .evening(messageDay.adding(days: 1)) : .day(messageDay.adding(days: 1)), evening ? 2 : 1, 0.9)
        case "day" where next == "after" && afterNext == "tomorrow": return (.day(messageDay.adding(days: 2)), 3, 0.9)
        case "apres" where next == "demain": return (.day(messageDay.adding(days: 2)), 2, 0.9)
        case "this", "ce", "cette":
            if ["evening", "soir", "soiree"].contains(next) { return (.evening(messageDay), 2, 0.9) }
            if ["morning", "afternoon", "matin", "apres-midi"].contains(next) { return (.day(messageDay), 2, 0.85) }
            if let weekday = weekdays[next] {
                let ahead = (weekday - messageDay.isoWeekday + 7) % 7
                return (.day(messageDay.adding(days: ahead)), 2, 0.9)
            }
        case "next":
            if let weekday = weekdays[next] {
                return (.day(messageDay.monday.adding(days: 7 + weekday - 1)), 2, 0.9)
            }
            if next == "week" { return (.week(messageDay.monday.adding(days: 7)), 2, 0.4) }
        case "in", "dans":
            if let count = number(next), (1...14).contains(count), ["days", "day", "jours", "jour"].contains(afterNext) {
                return (.day(messageDay.adding(days: count)), 3, 0.9)
            }
        case "semaine" where next == "prochaine": return (.week(messageDay.monday.adding(days: 7)), 2, 0.4)
        default: break
        }
        if let weekday = weekdays[word] {
            // "last Monday", "every Monday", "lundi dernier": a day gone by or a habit, not an event.
            if notAhead.contains(previous) || ["dernier", "derniere", "passe"].contains(next) { return (.day(messageDay), 1, 0) }
            if next == "prochain" { return (.day(messageDay.monday.adding(days: 7 + weekday - 1)), 2, 0.9) }
            let ahead = (weekday - messageDay.isoWeekday + 6) % 7 + 1
            // A weekday alone may be one gone by ("Thursday was rough"): only "on Thursday" is sure.
            return (.day(messageDay.adding(days: ahead)), 1, cues.contains(previous) ? 0.8 : 0.6)
        }
        if let month = months[word], let day = dayOfMonth(next) {
            guard let date = nextOccurrence(month: month, day: day, onOrAfter: messageDay) else { return nil }
            return (.day(date), 2, 0.9)
        }
        if let day = dayOfMonth(word), let month = months[next == "of" ? afterNext : next] {
            guard let date = nextOccurrence(month: month, day: day, onOrAfter: messageDay) else { return nil }
            return (.day(date), next == "of" ? 3 : 2, 0.9)
        }
        // "the 15th" (an ordinal, so that "the 3 of us" is no date), "le 12"; "the 15th of March" is a full date.
        if word == "the" || word == "le", let day = dayOfMonth(next), word == "le" || !next.allSatisfy(\.isNumber) {
            let monthWord = index + 3 < words.count && afterNext == "of" ? words[index + 3] : afterNext
            if let month = months[monthWord] {
                guard let date = nextOccurrence(month: month, day: day, onOrAfter: messageDay) else { return nil }
                return (.day(date), afterNext == "of" ? 4 : 3, 0.9)
            }
            return (.day(nextOccurrence(day: day, onOrAfter: messageDay)), 2, 0.85)
        }
        // "on 2/20"; without a cue, "2/20" may as well be a score ("stress is 7/10").
        if let date = numericDate(word, messageDay: messageDay, dayFirst: dayFirst) {
            return (.day(date), 1, cues.contains(previous) ? 0.85 : 0.5)
        }
        return nil
    }

    /// Words before a date that say it is one: "on Thursday", "by 2/20", "le 12".
    private static let cues: Set<String> = ["on", "by", "until", "till", "this", "next", "le", "au", "jusqu'au", "pour", "ce"]
    private static let notAhead: Set<String> = ["last", "every", "each", "past", "chaque", "tous", "les"]

    /// "2/20" (month first in English, day first in French), with an optional year.
    private static func numericDate(_ word: String, messageDay: LocalDate, dayFirst: Bool) -> LocalDate? {
        let parts = word.split(separator: "/").map(String.init)
        guard parts.count == 2 || parts.count == 3, let first = Int(parts[0]), let second = Int(parts[1]) else { return nil }
        let (month, day) = dayFirst ? (second, first) : (first, second)
        guard (1...12).contains(month), (1...31).contains(day) else { return nil }
        if parts.count == 3 {
            guard let year = Int(parts[2]), (0...9999).contains(year) else { return nil }
            return LocalDate(year: year < 100 ? 2000 + year : year, month: month, day: day)
        }
        return nextOccurrence(month: month, day: day, onOrAfter: messageDay)
    }

    /// The first `month`/`day` on or after `reference`: a date without a year is the next one to
    /// come (Feb 29 the next leap year's); nil for a day no month has ("Feb 30", "4/31").
    static func nextOccurrence(month: Int, day: Int, onOrAfter reference: LocalDate) -> LocalDate? {
        let year = reference.components.year
        for candidate in year...(year + 8) {
            if let date = LocalDate(year: candidate, month: month, day: day), date >= reference { return date }
        }
        return nil
    }

    /// The first day `day` of a month on or after `reference` ("the 31st" skips the shorter months;
    /// every day from 1 to 31 comes within the next three months).
    static func nextOccurrence(day: Int, onOrAfter reference: LocalDate) -> LocalDate {
        var (year, month, _) = reference.components
        while true {
            if let date = LocalDate(year: year, month: month, day: day), date >= reference { return date }
            month += 1
            if month > 12 {
                month = 1
                year += 1
            }
        }
    }

    private static func dayOfMonth(_ word: String) -> Int? {
        var digits = word
        for suffix in ["st", "nd", "rd", "th", "er", "e"] where digits.hasSuffix(suffix) {
            digits = String(digits.dropLast(suffix.count))
            break
        }
        guard let day = Int(digits), (1...31).contains(day) else { return nil }
        return day
    }

    private static func number(_ word: String) -> Int? {
        Int(word) ?? numberWords[word]
    }

    // MARK: Words

    private static func sentences(of text: String) -> [Substring] {
        text.split(whereSeparator: { ".!?;\n".contains($0) })
    }

    /// Lower-case words without accents; a slash stays inside a word ("2/20"), an apostrophe too.
    static func words(of text: Substring) -> [String] {
        let folded = text.replacingOccurrences(of: "’", with: "'")
            .folding(options: [.caseInsensitive, .diacriticInsensitive], locale: Locale(identifier: "en_US_POSIX"))
        return folded.split(whereSeparator: { !($0.isLetter || $0.isNumber || $0 == "/" || $0 == "'" || $0 == "-") })
            .flatMap { $0 == "apres-midi" ? [$0] : $0.split(separator: "-") }
            .map { word -> String in
                let word = String(word).trimmingCharacters(in: CharacterSet(charactersIn: "'"))
                return word.hasSuffix("'s") ? String(word.dropLast(2)) : word
            }
            .filter { !$0.isEmpty }
    }

    /// French elision: "l'entretien" is "entretien".
    private static func elided(_ word: String) -> String {
        guard let apostrophe = word.firstIndex(of: "'"), word.distance(from: word.startIndex, to: apostrophe) <= 3 else { return word }
        return String(word[word.index(after: apostrophe)...])
    }

    private static let weekdays: [String: Int] = [
        "monday": 1, "tuesday": 2, "wednesday": 3, "thursday": 4, "friday": 5, "saturday": 6, "sunday": 7,
        "lundi": 1, "mardi": 2, "mercredi": 3, "jeudi": 4, "vendredi": 5, "samedi": 6, "dimanche": 7,
    ]

    private static let months: [String: Int] = {
        var months: [String: Int] = [:]
        let english = [
            "january", "february", "march", "april", "may", "june", "july", "august", "september",
            "october", "november", "december",
        ]
        let french = [
            "janvier", "fevrier", "mars", "avril", "mai", "juin", "juillet", "aout", "septembre",
            "octobre", "novembre", "decembre",
        ]
        for (index, name) in english.enumerated() {
            months[name] = index + 1
            // "may" is a verb as often as a month: only the full word counts, and only before a day.
            if name.count > 4 { months[String(name.prefix(3))] = index + 1 }
        }
        months["sept"] = 9
        for (index, name) in french.enumerated() { months[name] = index + 1 }
        return months
    }()

    private static let numberWords: [String: Int] = [
        "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10,
        "couple": 2, "un": 1, "deux": 2, "trois": 3, "quatre": 4, "cinq": 5, "sept": 7, "huit": 8, "neuf": 9, "dix": 10,
    ]

    /// Words that name an event, mapped to the category recorded for it. French ones count only in
    /// a French user's messages ("of course" is no race).
    private static let englishEventWords: [String: String] = {
        var words: [String: String] = [:]
        for word in [
            "presentation", "interview", "meeting", "deadline", "appointment", "exam", "test", "race",
            "marathon", "game", "match", "date", "dinner", "party", "wedding", "trip", "flight", "surgery",
            "conversation", "review", "pitch", "call", "competition", "recital", "concert",
            "tournament", "audition", "speech",
        ] {
            words[word] = word
        }
        return words
    }()

    private static let frenchEventWords: [String: String] = {
        var words = englishEventWords
        for (french, category) in [
            ("entretien", "interview"), ("reunion", "meeting"),
            ("rdv", "appointment"), ("examen", "exam"), ("course", "race"), ("diner", "dinner"),
            ("fete", "party"), ("mariage", "wedding"), ("voyage", "trip"), ("vol", "flight"),
            ("soutenance", "presentation"), ("competition", "competition"), ("concours", "exam"),
        ] {
            words[french] = category
        }
        words["rendez"] = "appointment"
        return words
    }()
}
