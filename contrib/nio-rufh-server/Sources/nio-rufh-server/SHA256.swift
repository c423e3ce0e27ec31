// A small streaming SHA-256 (FIPS 180-4), so the server can report the digest of what it stored without
// pulling in swift-crypto (whose BoringSSL build would dominate the build time of this test tool).

struct SHA256 {
    private static let k: [UInt32] = [
        0x428a_2f98, 0x7137_4491, 0xb5c0_fbcf, 0xe9b5_dba5, 0x3956_c25b, 0x59f1_11f1, 0x923f_82a4, 0xab1c_5ed5,
        0xd807_aa98, 0x1283_5b01, 0x2431_85be, 0x550c_7dc3, 0x72be_5d74, 0x80de_b1fe, 0x9bdc_06a7, 0xc19b_f174,
        0xe49b_69c1, 0xefbe_4786, 0x0fc1_9dc6, 0x240c_a1cc, 0x2de9_2c6f, 0x4a74_84aa, 0x5cb0_a9dc, 0x76f9_88da,
        0x983e_5152, 0xa831_c66d, 0xb003_27c8, 0xbf59_7fc7, 0xc6e0_0bf3, 0xd5a7_9147, 0x06ca_6351, 0x1429_2967,
        0x27b7_0a85, 0x2e1b_2138, 0x4d2c_6dfc, 0x5338_0d13, 0x650a_7354, 0x766a_0abb, 0x81c2_c92e, 0x9272_2c85,
        0xa2bf_e8a1, 0xa81a_664b, 0xc24b_8b70, 0xc76c_51a3, 0xd192_e819, 0xd699_0624, 0xf40e_3585, 0x106a_a070,
        0x19a4_c116, 0x1e37_6c08, 0x2748_774c, 0x34b0_bcb5, 0x391c_0cb3, 0x4ed8_aa4a, 0x5b9c_ca4f, 0x682e_6ff3,
        0x748f_82ee, 0x78a5_636f, 0x84c8_7814, 0x8cc7_0208, 0x90be_fffa, 0xa450_6ceb, 0xbef9_a3f7, 0xc671_78f2,
    ]

    private var state: [UInt32] = [
        0x6a09_e667, 0xbb67_ae85, 0x3c6e_f372, 0xa54f_f53a, 0x510e_527f, 0x9b05_688c, 0x1f83_d9ab, 0x5be0_cd19,
    ]
    private var pending: [UInt8] = []
    private var schedule = [UInt32](repeating: 0, count: 64)
    private var totalBytes: UInt64 = 0

    init() {
        self.pending.reserveCapacity(64)
    }

    mutating func update(_ bytes: UnsafeRawBufferPointer) {
        guard !bytes.isEmpty else { return }
        self.totalBytes &+= UInt64(bytes.count)
        var index = 0
        if !self.pending.isEmpty {
            let take = min(64 - self.pending.count, bytes.count)
            self.pending.append(contentsOf: bytes[0..<take])
            index = take
            if self.pending.count == 64 {
                let block = self.pending
                block.withUnsafeBytes { self.compress(UnsafeRawBufferPointer(rebasing: $0[0..<64])) }
                self.pending.removeAll(keepingCapacity: true)
            }
        }
        while bytes.count - index >= 64 {
            self.compress(UnsafeRawBufferPointer(rebasing: bytes[index..<(index + 64)]))
            index += 64
        }
        if index < bytes.count {
            self.pending.append(contentsOf: bytes[index...])
        }
    }

    mutating func update(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { self.update($0) }
    }

    /// Finishes the digest and returns it as lowercase hex. The value must not be updated afterwards.
    mutating func finalizeHex() -> String {
        let bitLength = self.totalBytes &* 8
        var tail: [UInt8] = [0x80]
        let used = (self.pending.count + 1) % 64
        let zeros = used <= 56 ? 56 - used : 120 - used
        tail.append(contentsOf: repeatElement(0, count: zeros))
        for shift in stride(from: 56, through: 0, by: -8) {
            tail.append(UInt8(truncatingIfNeeded: bitLength >> UInt64(shift)))
        }
        let savedTotal = self.totalBytes
        self.update(tail)
        self.totalBytes = savedTotal
        precondition(self.pending.isEmpty)
        let hexDigits = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(64)
        for word in self.state {
            for shift in stride(from: 28, through: 0, by: -4) {
                out.append(hexDigits[Int((word >> UInt32(shift)) & 0xf)])
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    private mutating func compress(_ block: UnsafeRawBufferPointer) {
        @inline(__always) func rotr(_ x: UInt32, _ n: UInt32) -> UInt32 { (x >> n) | (x << (32 - n)) }
        self.schedule.withUnsafeMutableBufferPointer { w in
            for t in 0..<16 {
                let b = t * 4
                w[t] = UInt32(block[b]) << 24 | UInt32(block[b + 1]) << 16 | UInt32(block[b + 2]) << 8
                    | UInt32(block[b + 3])
            }
            for t in 16..<64 {
                let s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3)
                let s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10)
                w[t] = w[t - 16] &+ s0 &+ w[t - 7] &+ s1
            }
            self.state.withUnsafeMutableBufferPointer { h in
                var a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7]
                SHA256.k.withUnsafeBufferPointer { k in
                    for t in 0..<64 {
                        let s1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)
                        let ch = (e & f) ^ (~e & g)
                        let t1 = hh &+ s1 &+ ch &+ k[t] &+ w[t]
                        let s0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)
                        let maj = (a & b) ^ (a & c) ^ (b & c)
                        let t2 = s0 &+ maj
                        hh = g
                        g = f
                        f = e
                        e = d &+ t1
                        d = c
                        c = b
                        b = a
                        a = t1 &+ t2
                    }
                }
                h[0] &+= a
                h[1] &+= b
                h[2] &+= c
                h[3] &+= d
                h[4] &+= e
                h[5] &+= f
                h[6] &+= g
                h[7] &+= hh
            }
        }
    }
}
