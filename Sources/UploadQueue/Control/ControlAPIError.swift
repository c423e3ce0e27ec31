/// A refusal of the control API's own (a bad parameter, a forbidden choice), with the HTTP status it answers.
struct ControlAPIError: Error {
    var status: Int
    var code: String
    var message: String

    init(_ status: Int, _ code: String, _ message: String) {
        self.status = status
        self.code = code
        self.message = message
    }
}
