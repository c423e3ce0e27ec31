import Foundation
import Testing
@testable import UploadQueue

/// HTTP dates (`Retry-After`, `Date`), read by hand in the three forms RFC 9110 §5.6.7 requires.
struct HTTPDateTests {
    @Test("IMF-fixdate, RFC 850 and asctime give the same instant; impossible or foreign dates give nil")
    func forms() {
        let expected = Date(timeIntervalSince1970: 784_111_777)  // 1994-11-06 08:49:37 UTC
        #expect(HTTPResponse.parseHTTPDate("Sun, 06 Nov 1994 08:49:37 GMT") == expected)
        #expect(HTTPResponse.parseHTTPDate("Sunday, 06-Nov-94 08:49:37 GMT") == expected)
        #expect(HTTPResponse.parseHTTPDate("Sun Nov  6 08:49:37 1994") == expected)
        #expect(HTTPResponse.parseHTTPDate("  Tue, 29 Feb 2028 23:59:59 GMT ") == Date(timeIntervalSince1970: 1_835_481_599))
        #expect(HTTPResponse.parseHTTPDate("Sat, 01 Jan 1970 00:00:00 GMT") == Date(timeIntervalSince1970: 0))
        for bad in ["Tue, 29 Feb 2027 00:00:00 GMT", "Sun, 06 Nov 1994 24:00:00 GMT", "Sun, 06 Foo 1994 08:49:37 GMT",
                    "Sun, 06 Nov 1994 08:49:37 CET", "Sun, 6 Nov 1994 08:49:37 GMT", "Sun, 06 Nov 1994 08:49 GMT",
                    "1994-11-06T08:49:37Z", "", "Sun, ٠٦ Nov 1994 08:49:37 GMT"] {
            #expect(HTTPResponse.parseHTTPDate(bad) == nil, "\(bad)")
        }
    }

    @Test("Retry-After: seconds or a date, never negative, at most a day")
    func retryAfter() {
        let now = Date(timeIntervalSince1970: 784_111_777)
        #expect(HTTPResponse.parseRetryAfter("120", now: now) == .seconds(120))
        #expect(HTTPResponse.parseRetryAfter("Sun, 06 Nov 1994 08:50:37 GMT", now: now) == .seconds(60))
        #expect(HTTPResponse.parseRetryAfter("Sun, 06 Nov 1994 08:48:37 GMT", now: now) == .zero)
        #expect(HTTPResponse.parseRetryAfter("Sun, 13 Nov 1994 08:49:37 GMT", now: now) == .seconds(86_400))
        #expect(HTTPResponse.parseRetryAfter("soon", now: now) == nil)
    }
}
