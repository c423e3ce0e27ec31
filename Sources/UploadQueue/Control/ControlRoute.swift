/// One endpoint of the control API, matched from a request's method and path; pure, tested without a socket.
package enum ControlRoute: Equatable, Sendable {
    case health
    case status
    case enqueue
    case enqueueBatch
    case jobs
    case job(JobID)
    case cancel(JobID)
    case retry(JobID)
    case skip(JobID)
    case wait(JobID)
    case completions
    case acknowledge(JobID)
    case link
    case setLink
    case config
    case prune
    case retryFailed
    case events
    case followEvents
    case lanes
    case groups
    case group(String)
    case closeGroup(String)
    case acknowledgeGroup(String)
    case spool

    /// How a route is made from its path: as is, or from the job id in it.
    private enum Builder: Sendable {
        case fixed(ControlRoute)
        case job(@Sendable (JobID) -> ControlRoute)
        /// From a group's name (one segment of the decoded path).
        case name(@Sendable (String) -> ControlRoute)
    }

    private static let routes: [(method: String, path: String, builder: Builder)] = [
        ("GET", "/v1/health", .fixed(.health)),
        ("GET", "/v1/status", .fixed(.status)),
        ("POST", "/v1/jobs", .fixed(.enqueue)),
        ("GET", "/v1/jobs", .fixed(.jobs)),
        ("POST", "/v1/jobs/batch", .fixed(.enqueueBatch)),
        ("POST", "/v1/jobs/retry-failed", .fixed(.retryFailed)),
        ("GET", "/v1/jobs/{id}", .job { .job($0) }),
        ("POST", "/v1/jobs/{id}/cancel", .job { .cancel($0) }),
        ("POST", "/v1/jobs/{id}/retry", .job { .retry($0) }),
        ("POST", "/v1/jobs/{id}/skip", .job { .skip($0) }),
        ("GET", "/v1/jobs/{id}/wait", .job { .wait($0) }),
        ("GET", "/v1/completions", .fixed(.completions)),
        ("POST", "/v1/completions/{id}/ack", .job { .acknowledge($0) }),
        ("GET", "/v1/events", .fixed(.events)),
        ("GET", "/v1/events/stream", .fixed(.followEvents)),
        ("GET", "/v1/link", .fixed(.link)),
        ("PUT", "/v1/link", .fixed(.setLink)),
        ("GET", "/v1/config", .fixed(.config)),
        ("POST", "/v1/prune", .fixed(.prune)),
        ("GET", "/v1/lanes", .fixed(.lanes)),
        ("GET", "/v1/groups", .fixed(.groups)),
        ("GET", "/v1/groups/{name}", .name { .group($0) }),
        ("POST", "/v1/groups/{name}/close", .name { .closeGroup($0) }),
        ("POST", "/v1/groups/{name}/ack", .name { .acknowledgeGroup($0) }),
        ("GET", "/v1/spool", .fixed(.spool)),
    ]

    /// Every route as the OpenAPI document (`docs/api/openapi.yaml`) names it: a test checks the two agree.
    package static var table: [(method: String, path: String)] { routes.map { ($0.method, $0.path) } }

    /// Why a request matched no route.
    package enum Miss: Error, Equatable {
        /// No route has this path.
        case notFound
        /// The path is a route's, the method is not: these are.
        case methodNotAllowed([String])
        /// The path names a job, but not with a job id.
        case badJobID(String)
        /// The path names a group, but not with a group's name (1 to 128 characters, percent-encoded).
        case badName(String)
    }

    /// The route of `method` on `path` (the path without its query).
    package static func match(method: String, path: String) -> Result<ControlRoute, Miss> {
        let segments = path.split(separator: "/", omittingEmptySubsequences: false).dropFirst().map(String.init)
        guard path.hasPrefix("/"), !segments.contains(where: \.isEmpty) else { return .failure(.notFound) }
        var allowed: [String] = []
        var candidates = routes.filter { route in
            let parts = route.path.split(separator: "/").map(String.init)
            return parts.count == segments.count
                && zip(parts, segments).allSatisfy({ $0 == "{id}" || $0 == "{name}" || $0 == $1 })
        }
        // A path spelled out (`/v1/jobs/batch`) is its own route, never a job's.
        if candidates.contains(where: { !$0.path.contains("{") }) {
            candidates.removeAll { $0.path.contains("{") }
        }
        for (routeMethod, template, builder) in candidates {
            let parts = template.split(separator: "/").map(String.init)
            guard routeMethod == method else {
                allowed.append(routeMethod)
                continue
            }
            switch builder {
            case .fixed(let route):
                return .success(route)
            case .job(let make):
                let text = segments[parts.firstIndex(of: "{id}") ?? 0]
                guard let id = JobID(text) else { return .failure(.badJobID(text)) }
                return .success(make(id))
            case .name(let make):
                let text = segments[parts.firstIndex(of: "{name}") ?? 0]
                // The path is percent-decoded already (`ControlRequest`): a group's name has no `/`.
                guard OrderRule.isValidGroupName(text) else { return .failure(.badName(text)) }
                return .success(make(text))
            }
        }
        return .failure(allowed.isEmpty ? .notFound : .methodNotAllowed(allowed))
    }
}
