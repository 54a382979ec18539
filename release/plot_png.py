"""release/plot_png.py - a grouped bar chart written as a PNG with the standard library only
(zlib, struct): the GPU box has no plotting package and cannot install one. Bars per group and
series, a floor tick per group, value labels and a legend in a 5x7 bitmap font (upper case,
digits and a little punctuation; other characters draw as blanks)."""
import struct
import zlib

GLYPHS = {  # 5 columns x 7 rows, '#' = ink
    "0": "01110 10001 10011 10101 11001 10001 01110", "1": "00100 01100 00100 00100 00100 00100 01110",
    "2": "01110 10001 00001 00010 00100 01000 11111", "3": "11110 00001 00001 01110 00001 00001 11110",
    "4": "00010 00110 01010 10010 11111 00010 00010", "5": "11111 10000 11110 00001 00001 10001 01110",
    "6": "00110 01000 10000 11110 10001 10001 01110", "7": "11111 00001 00010 00100 01000 01000 01000",
    "8": "01110 10001 10001 01110 10001 10001 01110", "9": "01110 10001 10001 01111 00001 00010 01100",
    "A": "01110 10001 10001 11111 10001 10001 10001", "B": "11110 10001 10001 11110 10001 10001 11110",
    "C": "01110 10001 10000 10000 10000 10001 01110", "D": "11110 10001 10001 10001 10001 10001 11110",
    "E": "11111 10000 10000 11110 10000 10000 11111", "F": "11111 10000 10000 11110 10000 10000 10000",
    "G": "01110 10001 10000 10111 10001 10001 01111", "H": "10001 10001 10001 11111 10001 10001 10001",
    "I": "01110 00100 00100 00100 00100 00100 01110", "J": "00111 00010 00010 00010 00010 10010 01100",
    "K": "10001 10010 10100 11000 10100 10010 10001", "L": "10000 10000 10000 10000 10000 10000 11111",
    "M": "10001 11011 10101 10101 10001 10001 10001", "N": "10001 10001 11001 10101 10011 10001 10001",
    "O": "01110 10001 10001 10001 10001 10001 01110", "P": "11110 10001 10001 11110 10000 10000 10000",
    "Q": "01110 10001 10001 10001 10101 10010 01101", "R": "11110 10001 10001 11110 10100 10010 10001",
    "S": "01111 10000 10000 01110 00001 00001 11110", "T": "11111 00100 00100 00100 00100 00100 00100",
    "U": "10001 10001 10001 10001 10001 10001 01110", "V": "10001 10001 10001 10001 10001 01010 00100",
    "W": "10001 10001 10001 10101 10101 10101 01010", "X": "10001 10001 01010 00100 01010 10001 10001",
    "Y": "10001 10001 01010 00100 00100 00100 00100", "Z": "11111 00001 00010 00100 01000 10000 11111",
    ".": "00000 00000 00000 00000 00000 01100 01100", "-": "00000 00000 00000 11111 00000 00000 00000",
    ":": "00000 01100 01100 00000 01100 01100 00000", "/": "00001 00010 00010 00100 01000 01000 10000",
    "_": "00000 00000 00000 00000 00000 00000 11111", "=": "00000 00000 11111 00000 11111 00000 00000",
}
COLOURS = [(52, 101, 164), (204, 102, 0), (78, 154, 6), (117, 80, 123)]


class Canvas:
    def __init__(self, w, h):
        self.w, self.h = w, h
        self.px = bytearray(b"\xff" * (w * h * 3))

    def rect(self, x0, y0, x1, y1, rgb):
        for y in range(max(0, y0), min(self.h, y1)):
            row = (y * self.w) * 3
            for x in range(max(0, x0), min(self.w, x1)):
                self.px[row + 3 * x:row + 3 * x + 3] = bytes(rgb)

    def text(self, x, y, s, rgb=(0, 0, 0), scale=2):
        for ch in s.upper():
            g = GLYPHS.get(ch)
            if g:
                for r, bits in enumerate(g.split()):
                    for c, b in enumerate(bits):
                        if b == "1":
                            self.rect(x + c * scale, y + r * scale, x + (c + 1) * scale,
                                      y + (r + 1) * scale, rgb)
            x += 6 * scale

    def save(self, path):
        raw = b"".join(b"\x00" + bytes(self.px[y * self.w * 3:(y + 1) * self.w * 3])
                       for y in range(self.h))

        def chunk(kind, data):
            c = struct.pack(">I", len(data)) + kind + data
            return c + struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff)

        with open(path, "wb") as f:
            f.write(b"\x89PNG\r\n\x1a\n")
            f.write(chunk(b"IHDR", struct.pack(">IIBBBBB", self.w, self.h, 8, 2, 0, 0, 0)))
            f.write(chunk(b"IDAT", zlib.compress(raw, 9)))
            f.write(chunk(b"IEND", b""))


def bar_chart(path, title, groups, series, floors, w=900, h=480):
    """groups: labels along x; series: [(label, [value per group])]; floors: a value per group
    drawn as a black tick across the group (None to skip)."""
    cv = Canvas(w, h)
    left, right, top, bottom = 70, w - 20, 60, h - 50
    vmax = max([v for _, vals in series for v in vals] + [f for f in floors if f] + [1e-9])
    scale = (bottom - top) / (vmax * 1.1)
    cv.rect(left, top, left + 2, bottom, (0, 0, 0))
    cv.rect(left, bottom, right, bottom + 2, (0, 0, 0))
    for i in range(5):  # y grid with labels
        v = vmax * 1.1 * i / 4
        y = bottom - int(v * scale)
        cv.rect(left, y, right, y + 1, (220, 220, 220))
        cv.text(5, y - 7, f"{v:.3g}", scale=2)
    gw = (right - left) / max(1, len(groups))
    bw = gw * 0.7 / max(1, len(series))
    for gi, g in enumerate(groups):
        x0 = left + gi * gw + gw * 0.15
        for si, (_, vals) in enumerate(series):
            bx = int(x0 + si * bw)
            by = bottom - int(vals[gi] * scale)
            cv.rect(bx, by, int(bx + bw) - 2, bottom, COLOURS[si % len(COLOURS)])
            cv.text(bx, by - 12, f"{vals[gi]:.3g}", scale=1)
        if floors[gi]:
            fy = bottom - int(floors[gi] * scale)
            cv.rect(int(x0) - 4, fy, int(x0 + gw * 0.7) + 4, fy + 2, (0, 0, 0))
        cv.text(int(x0 + gw * 0.25), bottom + 12, g, scale=2)
    cv.text(left, 12, title, scale=2)
    lx = left + 10
    for si, (label, _) in enumerate(series):
        cv.rect(lx, 36, lx + 14, 50, COLOURS[si % len(COLOURS)])
        cv.text(lx + 20, 37, label, scale=2)
        lx += 40 + 12 * len(label)
    cv.rect(lx, 42, lx + 20, 44, (0, 0, 0))
    cv.text(lx + 26, 37, "FLOOR", scale=2)
    cv.save(path)
