"""What the customer wrote now: a message without its quoted history, forwards and footers.

`read` is the one place a customer's message is split, at intake (`cases/intake.py`) and by
`advisor eval` on a labelled line, which stands for a message as it arrives. HTML becomes text
first (a `<blockquote>` becomes `> ` lines); `quotequail` finds where a reply's quoted part or
a forwarded message begins ("On ... wrote:", "Am ... schrieb", "-----Original Message-----",
an Outlook rule of underscores); a block of `> ` lines at the end, with the line that
introduces it, is quoted in any language; a signature under a "-- " line and a
"Sent from my iPhone" line are footers. What is taken out is `Reading.earlier`: kept on the
case for a person, read for a field only when it is the customer's own mail (sent again, from
their address or signed with their name) or the one they point at ("the order below"): then
its body is added to `Reading.current`.

`mail-parser-reply` was measured beside `quotequail` (`docs/advisor-data.md`): it also cuts
signatures, but from a greeting on ("Thank you, please refund 40 EUR" went with the
signature) and cost 0.8 ms a message with its fourteen languages' patterns; `quotequail`
cuts only at a header it is sure of, in 0.2-0.4 ms.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from html import unescape
from html.parser import HTMLParser

import quotequail

__all__ = ["Reading", "html_to_text", "read"]


@dataclass(frozen=True)
class Reading:
    current: str  # what the customer wrote now: the advisor reads this only
    earlier: str  # quoted history, forwarded messages, signatures and footers ("" if none)
    history: str = ""  # the quoted or forwarded mail alone, without footers ("" if none)


# ---------------------------------------------------------------- HTML

_LOOKS_HTML = re.compile(
    r"<(?:br|p|div|span|html|body|table|tr|td|li|blockquote|b|i|font|a)\b[^>]*>|&(?:nbsp|amp|lt"
    r"|gt|quot|#\d+|#x[0-9a-f]+);",
    re.IGNORECASE,
)
_BREAKS = frozenset({"br", "p", "div", "tr", "li", "h1", "h2", "h3", "h4", "table", "ul", "ol"})
_CELLS = frozenset({"td", "th"})
_DROPPED = frozenset({"style", "script", "head", "title"})


class _Text(HTMLParser):
    """Text of an HTML body: breaks where blocks end, cells apart, quotes as `> ` lines."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self.depth = 0  # inside <blockquote>
        self.dropped = 0  # inside <style>, <script>

    def _newline(self) -> None:
        self.out.append("\n" + "> " * self.depth)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _DROPPED:
            self.dropped += 1
        elif tag == "blockquote":
            self.depth += 1
            self._newline()
        elif tag in _BREAKS:
            self._newline()
        elif tag in _CELLS:
            self.out.append(" ")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "br":
            self._newline()

    def handle_endtag(self, tag: str) -> None:
        if tag in _DROPPED:
            self.dropped = max(0, self.dropped - 1)
        elif tag == "blockquote":
            self.depth = max(0, self.depth - 1)
            self._newline()
        elif tag in _BREAKS:
            self._newline()

    def handle_data(self, data: str) -> None:
        if self.dropped:
            return
        if self.depth:
            data = data.replace("\n", "\n" + "> " * self.depth)
        self.out.append(data)


def html_to_text(text: str) -> str:
    """Plain text of a message that holds HTML (tags or entities such as `&nbsp;`); other text
    unchanged."""
    if not _LOOKS_HTML.search(text):
        return text
    parser = _Text()
    parser.feed(text)
    parser.close()
    plain = unescape("".join(parser.out)).replace("\u00a0", " ")
    lines = [re.sub(r"[ \t]+", " ", line).strip() for line in plain.split("\n")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


# ---------------------------------------------------------------- quotes and footers

_QUOTED = re.compile(r"^\s*>")
# The line that introduces a quote, in any language: it ends with a colon and names a sender
# (an address) or a time ("... 10:12 ... <help@shop.example>:", "... 14:03 tarihinde X yazdi:").
_INTRO = re.compile(r"(?:@|\d{1,2}:\d{2}|\d{4}).*:\s*$")
# A line of a mail's header block: "From: ...", "Von: ...", "Kimden: ...", "Od: ...".
_HEADER = re.compile(r"^\s*\*?[\w\u0600-\u06ff -]{2,20}\*?\s*:\s*\S")
_RULE = re.compile(r"^\s*(?:[-_=]{5,}.*|.*[-_=]{5,})\s*$")
# "Sent from my iPhone", "Enviado do meu iPhone", "iPhone'umdan gönderildi": a short line
# naming a device or a mail app, at the end of what is left.
_SENT_FROM = re.compile(
    r"^\s*(?:\S+\s+){0,4}(?:i?phone|ipad|android|galaxy|samsung|huawei|xiaomi|pixel|outlook"
    r"|blackberry|mobile|móvil|celular|telefon\w*|handy)\S*(?:\s+\S+){0,4}\s*$",
    re.IGNORECASE,
)
_SIGNATURE_RULE = re.compile(r"^--\s?$")


def _header_block_at(lines: list[str], i: int) -> bool:
    """Whether lines[i:] open a mail's header block: two "Name: value" lines, one an address."""
    block = [line for line in lines[i : i + 6] if line.strip()]
    headers = [line for line in block[:4] if _HEADER.match(line)]
    return len(headers) >= 2 and any("@" in line for line in headers)


_TIME = re.compile(r"\d{1,2}:\d{2}")


def _quoted_headers_at(lines: list[str], i: int) -> bool:
    """An Outlook header block with no rule above it ("Von: ... <a@b>", "Gesendet: ... 10:12",
    "An: ...", "Betreff: ..."), with the quoted mail under it: three "Name: value" lines in a
    row, one with an address and one with a time. A web form's dump ("Email: ...", "Order:
    ...") has no time of sending and is what the customer wrote."""
    block = lines[i : i + 3]
    if len(block) < 3 or not all(_HEADER.match(line) for line in block):
        return False
    joined = "\n".join(lines[i : i + 5])
    rest = "\n".join(lines[i + 3 :])
    return "@" in joined and bool(_TIME.search(joined)) and bool(_WORD.search(rest))


def _structural_cut(lines: list[str]) -> int | None:
    """Where quoted history begins by its shape alone, whatever the language: a rule line over
    a header block with an address (a forwarded message), or the `> ` lines that run to the end
    (with the line introducing them). A header block alone is not enough: a web form's dump
    ("Email: ...", "Order: ...") is what the customer wrote."""
    for i, line in enumerate(lines):
        if _RULE.match(line) and i + 1 < len(lines) and _header_block_at(lines, i + 1):
            return i
        if i and not lines[i - 1].strip() and _quoted_headers_at(lines, i):
            return i
    tail = len(lines)
    while tail and (not lines[tail - 1].strip() or _QUOTED.match(lines[tail - 1])):
        tail -= 1
    if tail == len(lines) or not any(_QUOTED.match(line) for line in lines[tail:]):
        return None
    intro = tail - 1
    while intro >= 0 and not lines[intro].strip():
        intro -= 1
    if intro >= 0 and _INTRO.search(lines[intro]) and len(lines[intro]) < 200:
        return intro
    return tail


def _below_the_quote(hidden: str) -> str:
    """The lines under a quote that answer it ("On ... wrote:", "> ...", then the reply): the
    unquoted lines after the quote's last `> ` line, when the quote is made of `> ` lines."""
    lines = hidden.split("\n")
    body = [line for line in lines[1:] if line.strip()]
    if not body or not _QUOTED.match(body[0]):
        return ""
    last = max(i for i, line in enumerate(lines) if _QUOTED.match(line))
    tail = "\n".join(lines[last + 1 :])
    return tail if _WORD.search(tail) else ""


def _a_signature(lines: list[str]) -> bool:
    """What follows a "-- " line is a signature when it is a few short lines (a name, a title,
    a phone), not a paragraph someone wrote under a dash line."""
    kept = [line for line in lines if line.strip()]
    return len(kept) <= 6 and all(len(line) <= 72 for line in kept)


def _footer_cut(lines: list[str]) -> int | None:
    """Where a signature ("-- " line) or a "Sent from my iPhone" line ends the message."""
    for i, line in enumerate(lines):
        if _SIGNATURE_RULE.match(line) and _a_signature(lines[i + 1 :]):
            return i
    last = len(lines)
    while last and not lines[last - 1].strip():
        last -= 1
    if last and _SENT_FROM.match(lines[last - 1]) and len(lines[last - 1]) < 60:
        return last - 1
    return None


_WORD = re.compile(r"[^\W\d_]{2,}")
_NOTHING_ABOVE = 3  # words: "FYI", "see below" above a forward is not a message of its own


def _forwarded(text: str) -> tuple[str, str] | None:
    """(header, body) of a message that is only a forward: the customer sends what they
    forward, and its headers are what is taken out."""
    unwrapped = quotequail.unwrap(text)
    if unwrapped and unwrapped.get("type") == "forward" and unwrapped.get("text"):
        body = unwrapped["text"]
        at = text.rfind(body.strip().split("\n", 1)[0])
        return (text[:at] if at > 0 else ""), body
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if _RULE.match(line) and i + 1 < len(lines) and _header_block_at(lines, i + 1):
            end = i + 1
            while end < len(lines) and (_HEADER.match(lines[end]) or not lines[end].strip()):
                if not lines[end].strip() and end > i + 1:
                    break
                end += 1
            return "\n".join(lines[:end]), "\n".join(lines[end:])
    return None


def read(message: str, sender: str | None = None) -> Reading:
    """The message split into what the customer wrote now and what was taken out. A message
    that is only a forward (nothing above it but a word or two) is the forwarded message. The
    earlier mail under a message is read with it when it is the customer's own (`_own`) or
    when the customer points at it ("please cancel the order below", `_POINTS_BELOW`)."""
    text = html_to_text(message.replace("\r\n", "\n"))
    said = _split(text)
    if len(_WORD.findall(said.current)) < _NOTHING_ABOVE and said.earlier:
        forward = _forwarded(text)
        if forward is not None and forward[1].strip():
            header, body = forward
            inner = _split(body)
            if inner.current:
                earlier = "\n\n".join(p.strip() for p in (header, inner.earlier) if p.strip())
                # its subject line is the forwarded mail's, as `_first_message` keeps it
                subject = [
                    line.strip()
                    for line in header.split("\n")
                    if _SUBJECT.match(line) and _WORD.search(line.split(":", 1)[-1])
                ]
                current = "\n\n".join([*subject[:1], inner.current])
                return Reading(current=current, earlier=earlier, history=inner.history)
    own = bool(said.history) and _own(said.current, said.history, sender)
    if own or (said.history and _POINTS_BELOW.search(said.current)):
        body = _first_message(said.history)
        if not own and not _POINTS_AT_ORDER.search(said.current):
            body = _without_amounts(body)  # "see below": its reference, not which amount
        if _WORD.search(body):
            return Reading(
                current=f"{said.current}\n\n{body}", earlier=said.earlier, history=said.history
            )
    return said


def _split(text: str) -> Reading:
    parts = quotequail.quote(text, limit=1_000_000, quote_intro_line=True)
    current = "\n".join(part for shown, part in parts if shown)
    hidden = "\n".join(part for shown, part in parts if not shown)
    below = _below_the_quote(hidden)
    if below:  # written under the quote it answers
        hidden = hidden[: len(hidden) - len(below)]
        current = f"{current}\n\n{below}" if current.strip() else below
    earlier = [hidden]
    history = [hidden]
    lines = current.split("\n")
    for cut in (_structural_cut, _footer_cut):
        at = cut(lines)
        if at is not None:
            earlier.insert(0, "\n".join(lines[at:]))
            if cut is _structural_cut:
                history.insert(0, "\n".join(lines[at:]))
            lines = lines[:at]
    return Reading(
        current="\n".join(lines).strip(),
        earlier="\n\n".join(part.strip() for part in earlier if part.strip()),
        history="\n\n".join(part.strip() for part in history if part.strip()),
    )


# ---------------------------------------------------------------- the customer's own earlier mail

# The customer says they send again what they wrote before: "I'm re-sending my message from
# last week", "Tekrar gönderiyorum", "Estou reenviando o e-mail que mandei", "Przesyłam dalej,
# co pisałam", "أعيد إرسال رسالتي". Forwarding what someone else wrote ("what the courier
# answered") is not one of them.
_RESENDS = re.compile(
    r"\bre-?send(?:ing)?\b|\bresent\b|\bsending (?:it|this|my \w+) again"
    r"|\bforward(?:ing)? (?:you )?my (?:own |earlier |previous |original |last )?"
    r"(?:message|e-?mail|mail|complaint|letter)"
    r"|\bmy (?:earlier|previous|original|last|first) (?:message|e-?mail|mail|complaint|letter)"
    r"|\bwhat i (?:wrote|sent)\b"
    r"|\b(?:sende|schicke)\b[^.\n]{0,30}\b(?:erneut|nochmal|noch einmal)\b"
    r"|\bmeine (?:nachricht|e-?mail|mail|anfrage) vom\b"
    r"|\bwas ich (?:ihnen|euch|dir) geschrieben"
    r"|\bje (?:vous )?(?:renvoie|réexpédie|retransmets|transfère) mon"
    r"|\bmon (?:précédent |premier )?(?:message|mail|e-?mail|courriel) du\b"
    r"|\bce que je vous ai (?:écrit|envoyé)"
    r"|\breenv[ií](?:o|ando|ou|amos)\b (?:(?:de nuevo |novamente )?(?:mi|meu|minha|o|a|el) )?"
    r"(?:correo|mensaje|e-?mail|mensagem|reclamaç)|\bestou reenviando\b"
    r"|\bvuelvo a (?:enviar|mandar)"
    r"|\b(?:lo|o) que (?:les|os|lhes|vos|te) (?:escribí|escrevi|mandei|envié)"
    r"|\b(?:e-?mail|correo|mensaje|mensagem) que (?:les |lhes |vos )?(?:mandei|enviei|envié|mandé)"
    r"|\b(?:ri)?(?:invio|inoltro) (?:di nuovo )?(?:il mio|la mia)\b|\bquello che vi ho scritto"
    r"|\b(?:stuur|verstuur) (?:ik )?(?:mijn|het|m'n) (?:bericht|mail|e-?mail) (?:nogmaals|opnieuw)"
    r"|\bnogmaals (?:mijn|m'n) (?:bericht|mail)|\bwat ik (?:jullie|u) (?:schreef|stuurde|heb)"
    r"|\bmijn eerdere (?:bericht|mail|e-?mail)"
    r"|\bprzesyłam (?:ponownie|jeszcze raz)|\bco (?:(?:wam|państwu|pani|panu) )?pisał(?:am|em)"
    r"|\bponownie wysyłam"
    r"|\bskickar (?:igen|om) (?:mitt|mina)|\bdet jag skrev\b|\bmitt (?:tidigare|förra) mejl"
    r"|\btekrar gönder|\byeniden gönder|\byazdığım (?:mesaj|mail|e-?posta)"
    r"|\bmesaj\w*[^.\n]{0,30}yazmıştım"
    r"|أعيد إرسال|اعيد ارسال|أعيد ارسال|رسالتي السابقة|أرسلتها لكم"
    r"|再送|以前(?:に)?送った|先日送った|前回送った",
    re.IGNORECASE,
)
# The customer points at the mail under theirs: "please cancel the order below", "siehe
# unten", "zie hieronder", "ver abaixo", "aşağıdaki sipariş", "下記の注文", "الطلب أدناه".
_POINTS_BELOW = re.compile(
    r"\bbelow\b|\bunderneath\b|\bunten\b|\buntenstehend|\bnachfolgend|\bhieronder\b|\bonderstaand"
    r"|\bci-?dessous\b|\bplus bas\b|\ben dessous\b|\babajo\b|\babaixo\b|\bqui sotto\b"
    r"|\bsottostante|\bdi seguito\b|\bponiżej\b|\bniżej\b|\bnedan\b|\bhär under\b"
    r"|\başağıda|下記|以下の|أدناه|ادناه|بالأسفل|(?:الموضح|الموضحة|المذكور|المذكورة|اللي|الي)\s+تحت",
    re.IGNORECASE,
)
# The pointer says which: the order (its total) or an item of it ("refund the order below",
# "Siehe Bestellung unten", "del pedido de abajo", "aşağıdaki siparişin", "下記の注文"), or the
# mail, invoice or receipt itself ("see the invoice below", "Siehe Ihre Mail unten", "mail
# poniżej"): a document that holds one charge.
_ORDER_WORD = (
    r"(?:order|purchase|bestellung|commande|pedido|ordine|bestelling|zamówieni\w*|sipariş\w*"
    r"|beställning\w*|encomenda|compra|注文|الطلب"
    r"|invoice|receipt|bill|e-?mail|mail|message|rechnung|quittung|beleg|nachricht"
    r"|facture|re[çc]u|courriel|factura|recibo|fattura|ricevuta|messaggio|mensaje|mensagem"
    r"|correo|factuur|bon|bericht|faktur\w*|paragon\w*|rachun\w*|wiadomoś\w*|kvitto\w*"
    r"|mejl\w*|fatura\w*|makbuz\w*|e-?posta\w*|請求書|領収書|メール|الفاتورة|الإيصال|الرسالة)"
)
_POINTS_AT_ORDER = re.compile(
    rf"{_ORDER_WORD}\W+(?:\w+\W+){{0,2}}?(?:{_POINTS_BELOW.pattern})"
    rf"|(?:{_POINTS_BELOW.pattern})\W*(?:\w+\W+){{0,2}}?の?{_ORDER_WORD}",
    re.IGNORECASE,
)
_ADDRESS = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")


def _without_amounts(body: str) -> str:
    """A mail with its amounts taken out: what a bare "see below" lets be read (the order's
    reference, not which amount)."""
    from refund_desk.advisor.extract import AMOUNT  # imported only when pointed at

    return AMOUNT.sub("[…]", body)  # marked, so a person reading it sees what was left out


def _own(current: str, history: str, sender: str | None) -> bool:
    """Whether the mail under the message is the customer's own: they say they send it again,
    it is from their address, or it is from the name they sign with."""
    if _RESENDS.search(current):
        return True
    top = [line for line in history.split("\n")[:8] if "@" in line]
    if not top:
        return False
    sender_line = top[0]
    found = _ADDRESS.search(sender_line)
    if sender and found and found.group(0).lower() == sender.strip().lower():
        return True
    name = _ADDRESS.sub("", sender_line.split(":", 1)[-1] if _HEADER.match(sender_line) else "")
    first = _WORD.search(name)
    if first is None or len(first.group(0)) < 3:
        return False
    signed = [line.strip() for line in current.split("\n") if line.strip()][-3:]
    return any(
        len(line.split()) <= 4 and first.group(0).lower() in line.lower().split() for line in signed
    )


# A header block's subject line is kept: it often names the order ("Subject: Order LL-1234").
_SUBJECT = re.compile(
    r"^\s*\*?(?:subject|betreff|objet|asunto|assunto|oggetto|onderwerp|temat|ämne|konu|件名"
    r"|الموضوع)\*?\s*:",
    re.IGNORECASE,
)


def _first_message(history: str) -> str:
    """The body of the first mail in quoted or forwarded history: its rule, header block or
    "On ... wrote:" line left out, `> ` taken off, up to the next mail it quotes."""
    lines = [re.sub(r"^\s*> ?", "", line) for line in history.split("\n")]
    i = 0
    while i < len(lines) and (
        not lines[i].strip() or _RULE.match(lines[i]) or (i < 2 and _INTRO.search(lines[i]))
    ):
        i += 1
    while i < len(lines) and _HEADER.match(lines[i]):  # the header block, to its blank line
        i += 1
    subject = [
        line.strip() for line in lines[:i] if _SUBJECT.match(line) and _WORD.search(line[5:])
    ]
    body: list[str] = subject[:1]
    for j in range(i, len(lines)):
        if (_RULE.match(lines[j]) and _header_block_at(lines, j + 1)) or (
            _header_block_at(lines, j) and not lines[j - 1].strip()
        ):
            break
        if _INTRO.search(lines[j]) and j + 1 < len(lines) and history.split("\n")[j + 1 :]:
            nxt = history.split("\n")[j + 1 :]
            if any(_QUOTED.match(x) for x in nxt[:2]):
                break
        body.append(lines[j])
    return "\n".join(body).strip()
