/// The version `nudge --version` reports, and the tag of the standard container image.
public enum NudgeVersion {
    public static let current = "0.1.0"
}
