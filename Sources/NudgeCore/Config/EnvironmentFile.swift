import Foundation

/// The env file `nudge` reads itself (`NUDGE_ENV_FILE`, `/etc/nudge/env` as installed), so that
/// cron and systemd start it with nothing but that path: `DATABASE_URL` and the provider keys live
/// in one file readable by Nudge's user alone, never in a crontab or a unit.
///
/// The format is the one systemd's `EnvironmentFile=` and most shells read: `NAME=value` lines,
/// `#` comments and blank lines, an optional `export ` before the name, and a value optionally in
/// single quotes (taken as it is) or double quotes (where `\"` and `\\` stand for `"` and `\`).
///
/// It holds secrets, so it is refused when others could read or change it: world-readable, or
/// writable by its group or the world (checked on the file a symlink leads to), unless
/// `NUDGE_ENV_FILE_INSECURE=1` (set in the process environment) says the operator knows.
public struct EnvironmentFile: Sendable, Equatable {
    public let path: String
    public let values: [String: String]

    public init(path: String, insecureAllowed: Bool = false) throws(NudgeError) {
        let data = try SecretFile.load(path, what: "the env file \(path) (NUDGE_ENV_FILE)", insecureAllowed: insecureAllowed)
        guard let text = String(data: data, encoding: .utf8) else {
            throw NudgeError(.configuration, "the env file \(path) is not UTF-8 text")
        }
        self.path = path
        values = try Self.parse(text, path: path)
    }

    /// The variables of `text`. A line that is not a variable is an error naming its line number;
    /// the error never quotes the line, which may hold a secret.
    static func parse(_ text: String, path: String) throws(NudgeError) -> [String: String] {
        var values: [String: String] = [:]
        for (index, rawLine) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            var line = Substring(rawLine.hasSuffix("\r") ? rawLine.dropLast() : rawLine)
            line = line.drop { $0 == " " || $0 == "\t" }
            if line.isEmpty || line.hasPrefix("#") { continue }
            if line.hasPrefix("export ") { line = line.dropFirst("export ".count).drop { $0 == " " } }
            func fail(_ why: String) -> NudgeError {
                NudgeError(.configuration, "the env file \(path), line \(index + 1): \(why)")
            }
            guard let equals = line.firstIndex(of: "=") else { throw fail("expected NAME=value") }
            let name = String(line[..<equals]).trimmingCharacters(in: .whitespaces)
            guard let first = name.first, first == "_" || (first.isASCII && first.isLetter),
                name.allSatisfy({ $0 == "_" || ($0.isASCII && ($0.isLetter || $0.isNumber)) })
            else { throw fail("what comes before '=' is not a variable name (letters, digits and _)") }
            let rest = line[line.index(after: equals)...].trimmingCharacters(in: .whitespaces)
            values[name] = try value(rest, fail: fail)
        }
        return values
    }

    private static func value(_ text: String, fail: (String) -> NudgeError) throws(NudgeError) -> String {
        guard let quote = text.first, quote == "\"" || quote == "'" else {
            // Unquoted: a ` #` in it would be a comment to a shell and part of the value to
            // systemd; a secret cut short there fails far from here, so it is refused.
            if text.contains(" #") || text.contains("\t#") {
                throw fail("an unquoted value with ' #' in it: quote the value, or put the comment on a line of its own")
            }
            return text
        }
        var result = ""
        var escaped = false
        var index = text.index(after: text.startIndex)
        while index < text.endIndex {
            let character = text[index]
            if escaped {
                result.append(character == "n" ? "\n" : character)
                escaped = false
            } else if quote == "\"" && character == "\\" {
                escaped = true
            } else if character == quote {
                let after = text[text.index(after: index)...].trimmingCharacters(in: .whitespaces)
                guard after.isEmpty || after.hasPrefix("#") else { throw fail("text after the closing quote") }
                return result
            } else {
                result.append(character)
            }
            index = text.index(after: index)
        }
        throw fail("the value's quote is not closed")
    }
}

extension Environment {
    /// The process environment, with the variables of the env file `NUDGE_ENV_FILE` names where
    /// the process does not set them itself (so that `X=1 nudge …` still wins over the file).
    public static func loading(_ process: [String: String] = ProcessInfo.processInfo.environment) throws(NudgeError)
        -> (Environment, EnvironmentFile?)
    {
        guard let path = process["NUDGE_ENV_FILE"], !path.isEmpty else { return (Environment(process), nil) }
        let file = try EnvironmentFile(path: path, insecureAllowed: process["NUDGE_ENV_FILE_INSECURE"] == "1")
        return (Environment(process.merging(file.values) { own, _ in own }), file)
    }
}

/// A file that holds a secret (the env file, a provider's key): owned by root or by Nudge's own
/// user, readable by its owner and group alone, writable by its owner alone. The file is judged
/// as it is read (the same open file: a link or a rename in between changes nothing), and a link
/// is judged by the file it leads to.
public enum SecretFile {
    /// The contents of `path`, refused when others may read or change it, unless
    /// `insecureAllowed` (`NUDGE_ENV_FILE_INSECURE=1`). `what` names it in errors.
    public static func load(_ path: String, what: String, insecureAllowed: Bool) throws(NudgeError) -> Data {
        // Non-blocking: a FIFO planted at the path must not hang the process (it is refused below).
        let descriptor = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        guard descriptor >= 0 else {
            let why =
                switch errno {
                case ENOENT: "no such file"
                case EACCES: "permission denied"
                default: String(cString: strerror(errno))
                }
            throw NudgeError(.configuration, "cannot read \(what): \(why)")
        }
        let handle = FileHandle(fileDescriptor: descriptor, closeOnDealloc: true)
        var status = stat()
        guard fstat(descriptor, &status) == 0 else {
            throw NudgeError(.configuration, "cannot read \(what): \(String(cString: strerror(errno)))")
        }
        guard status.st_mode & S_IFMT == S_IFREG else {
            throw NudgeError(.configuration, "cannot read \(what): it is not a regular file")
        }
        if !insecureAllowed { try judge(status, path: path, what: what) }
        do {
            return try handle.readToEnd() ?? Data()
        } catch {
            throw NudgeError(.configuration, "cannot read \(what): \(describe(error))")
        }
    }

    private static func judge(_ status: stat, path: String, what: String) throws(NudgeError) {
        let mode = Int(status.st_mode) & 0o777
        let target = URL(fileURLWithPath: path).resolvingSymlinksInPath().path
        let named = target == path ? what : "\(what), a link to \(target),"
        let fix = "(or set NUDGE_ENV_FILE_INSECURE=1)"
        if status.st_uid != 0 && status.st_uid != getuid() {
            throw NudgeError(
                .configuration,
                """
                \(named) belongs to another user (uid \(status.st_uid)), who could change it: chown it to root or to the user \
                Nudge runs as \(fix)
                """)
        }
        if mode & 0o022 != 0 {
            throw NudgeError(
                .configuration,
                """
                \(named) can be changed by users other than its owner (mode \(String(mode, radix: 8))): chmod 640 it \(fix)
                """)
        }
        if mode & 0o004 != 0 {
            throw NudgeError(
                .configuration,
                """
                \(named) can be read by every user of this machine (mode \(String(mode, radix: 8))): chmod 640 it \(fix)
                """)
        }
    }

    /// The contents of a key file a setting names: systemd's copy when the unit hands it over as
    /// a credential (`LoadCredential=nudge:/etc/nudge/keys` makes `$CREDENTIALS_DIRECTORY/nudge_<its
    /// file name>`; a credential of its own name is read too), else the file itself, judged as
    /// `load` judges it. Only the process environment can let an insecure key file pass, never
    /// the env file (`NUDGE_ENV_FILE_INSECURE=1` must be set where the process is started).
    public static func read(
        _ path: String, setting: String, environment: Environment,
        process: [String: String] = ProcessInfo.processInfo.environment
    ) throws(NudgeError) -> Data {
        if let credentials = environment["CREDENTIALS_DIRECTORY"], !credentials.isEmpty {
            let name = URL(fileURLWithPath: path).lastPathComponent
            for handed in ["nudge_" + name, name] {
                let file = URL(fileURLWithPath: credentials).appendingPathComponent(handed).path
                if let data = FileManager.default.contents(atPath: file), !data.isEmpty { return data }
            }
        }
        let data = try load(path, what: "\(path) (\(setting))", insecureAllowed: process["NUDGE_ENV_FILE_INSECURE"] == "1")
        guard !data.isEmpty else { throw NudgeError(.configuration, "\(setting) names \(path), which is empty") }
        return data
    }
}
