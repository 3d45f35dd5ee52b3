import Foundation

/// The stand-in's copy when no test scripts it: put together from the prompt's PUSH TYPE, EVENT,
/// PATTERN and LAST TOPIC lines (the user's data without the marks around it), in the prompt's
/// language. It is canned, not written by a model, and the demo says so.
public enum CannedCopy {
    public static func reply(to prompt: String) -> String {
        func field(_ name: String) -> String? {
            guard let line = prompt.split(separator: "\n").first(where: { $0.hasPrefix(name + ": ") }) else { return nil }
            let value = line.dropFirst(name.count + 2)
            let opening = "<user_data>"
            let closing = "</user_data>"
            guard value.hasPrefix(opening), value.hasSuffix(closing) else { return String(value) }
            return String(value.dropFirst(opening.count).dropLast(closing.count))
        }
        let french = prompt.contains("write the notification in French")
        let title: String
        let body: String
        switch field("PUSH TYPE") {
        case "event_based":
            let event = field("EVENT") ?? "big day"
            title = french ? "Ton \(event) approche" : "Your \(event) is coming up"
            body =
                french
                ? "Comment te sens-tu avant ce moment ? On peut en parler quand tu veux."
                : "How are you feeling about it? I'm here if you'd like to talk it through."
        case "pattern_based":
            let pattern = field("PATTERN") ?? "a familiar pattern"
            title = french ? "Je pense à toi" : "Checking in on you"
            body =
                french
                ? "Tu es discret ces jours-ci. La dernière fois, c'était « \(pattern) ». On en parle ?"
                : "It's been quiet lately. Last time this happened, it was \(pattern). Want to talk?"
        default:
            let topic = field("LAST TOPIC") ?? "your goals"
            title = french ? "Ça fait quelques jours" : "It's been a few days"
            body =
                french
                ? "Tu repenses encore à ce qu'on s'est dit sur \(topic) ? Je suis là quand tu veux."
                : "Still thinking about what we discussed around \(topic)? I'm here when you're ready."
        }
        return #"{"title": "\#(escape(String(title.prefix(50))))", "body": "\#(escape(String(body.prefix(200))))"}"#
    }

    private static func escape(_ text: String) -> String {
        text.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
    }
}
