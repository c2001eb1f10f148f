"""What the customer wrote now: quoted history, forwards and footers are taken out of it."""

from __future__ import annotations

import pytest

from refund_desk.advisor.reply import html_to_text, read


def test_a_plain_message_is_all_current() -> None:
    said = read("The kettle leaks. Please refund 24,90 €.")
    assert said.current == "The kettle leaks. Please refund 24,90 €."
    assert said.earlier == ""


@pytest.mark.parametrize(
    "intro",
    [
        "On Tue, 4 Feb 2025 at 09:30, Help Desk <care@kettles.example> wrote:",
        "Am 04.02.2025 um 09:30 schrieb Help Desk <care@kettles.example>:",
        "Le mar. 4 févr. 2025 à 09:30, Help Desk <care@kettles.example> a écrit :",
        "Em ter., 4 de fev. de 2025 às 09:30, Help Desk <care@kettles.example> escreveu:",
        # headers no library pattern knows: found by their shape (a time or an address, a colon)
        "Il giorno mar 4 feb 2025 alle ore 09:30 Help Desk <care@kettles.example> ha scritto:",
        "4 Şub 2025 Sal 09:30 tarihinde Help Desk <care@kettles.example> şunu yazd\u0131:",
    ],
)
def test_the_quoted_reply_under_the_message_is_earlier(intro: str) -> None:
    quote = "> Your order 7710 of 180,00 € shipped."
    said = read(f"Still leaking, refund 24,90 €.\n\n{intro}\n{quote}")
    assert said.current == "Still leaking, refund 24,90 €."
    assert said.earlier.startswith(intro)
    assert "7710" in said.earlier and "7710" not in said.current


def test_a_forwarded_message_with_a_rule_and_headers_is_earlier() -> None:
    said = read(
        "See below, I never got it.\n\n-------- Weitergeleitete Nachricht --------\n"
        "Von: Versand <ship@kettles.example>\nDatum: 3. Februar 2025\nBetreff: Bestellung 55120\n\n"
        "Ihre Bestellung 55120 über 89,00 € ist unterwegs."
    )
    # "see below" points at it: its reference is read, not which amount
    assert said.current.startswith("See below, I never got it.\n\n")
    assert "55120" in said.current and "89,00" not in said.current
    assert "55120" in said.earlier and "89,00 €" in said.earlier


def test_an_outlook_rule_opens_the_earlier_mail() -> None:
    said = read(
        "Please refund the 45 GBP.\n\n________________________________\n"
        "From: Kettles <care@kettles.example>\nSent: 03 March 2025 10:12\nSubject: Order 9911\n\n"
        "Your order 9911 for £120.00 shipped."
    )
    assert said.current == "Please refund the 45 GBP."
    assert "9911" in said.earlier


@pytest.mark.parametrize(
    "footer", ["Sent from my iPhone", "Enviado do meu iPhone", "iPhone'umdan gönderildi"]
)
def test_a_sent_from_line_is_a_footer(footer: str) -> None:
    said = read(f"The lid snapped off, refund please.\n\n{footer}")
    assert said.current == "The lid snapped off, refund please."
    assert said.earlier == footer


def test_a_signature_under_a_dash_line_is_a_footer() -> None:
    said = read("Refund 12 USD please.\n-- \nMaria Lopez\nTel. +1 555 0100 · order desk 4471")
    assert said.current == "Refund 12 USD please."
    assert "4471" in said.earlier


def test_a_web_form_dump_is_what_the_customer_wrote() -> None:
    form = "Name: Ana\nEmail: ana@mail.example\nOrder: 4471\nAmount: 39,99 €\nMessage: broken"
    assert read(form) == read(form)  # deterministic
    assert read(form).current == form and read(form).earlier == ""


def test_html_becomes_text_and_a_blockquote_a_quote() -> None:
    said = read(
        "<div>The mug came&nbsp;broken, refund &euro;12,50<br>Thanks</div>"
        "<div>On Mon, 3 Mar 2025 10:00, Shop &lt;a@shop.example&gt; wrote:"
        "<blockquote>Order 9999 total €80,00<br>shipped</blockquote></div>"
    )
    assert said.current == "The mug came broken, refund €12,50\nThanks"
    assert "9999" in said.earlier and "80,00" in said.earlier


def test_html_to_text_leaves_plain_text_alone_and_drops_styles() -> None:
    assert html_to_text("a < b and 3 > 2") == "a < b and 3 > 2"
    assert html_to_text("<style>p{color:red}</style><p>Hello</p><p>there</p>") == "Hello\n\nthere"
    assert html_to_text("<table><tr><td>Lamp</td><td>39,99 €</td></tr></table>") == "Lamp 39,99 €"


def test_a_message_that_is_only_a_forward_is_the_forwarded_message() -> None:
    said = read(
        "---------- Forwarded message ---------\nFrom: Kim <kim@mail.example>\n"
        "Date: Mon, 7 Apr 2025 09:14\nSubject: my order\n\nThe blender never arrived. "
        "Refund 55 GBP please.\n\nSent from my phone"
    )
    # its subject line is the forwarded mail's (it often names the order), as a pointed-at
    # mail's is
    assert said.current == "Subject: my order\n\nThe blender never arrived. Refund 55 GBP please."
    assert said.earlier.startswith("---------- Forwarded message")
    assert "Sent from my phone" in said.earlier


def test_a_reply_written_under_the_quote_is_current() -> None:
    said = read(
        "On Mon, 11 Nov at 09:12, Returns Team wrote:\n> We refunded £84.99 for order 1200.\n\n"
        "That is not the fee I asked about: refund the £15 restocking fee on order 7730."
    )
    assert (
        said.current
        == "That is not the fee I asked about: refund the £15 restocking fee on order 7730."
    )
    assert "84.99" in said.earlier and "84.99" not in said.current


def test_an_outlook_header_block_with_no_rule_opens_the_earlier_mail() -> None:
    said = read(
        "Bitte erstatten Sie 49 €.\n\nVon: Shop <info@shop.example>\n"
        "Gesendet: Montag, 4. Mai 2026 10:21\nAn: Anna\nBetreff: Bestellung 88120\n\n"
        "Ihre Bestellung 88120 über 120,00 € ist unterwegs."
    )
    assert said.current == "Bitte erstatten Sie 49 €."
    assert "88120" in said.earlier


def test_a_paragraph_under_a_dash_line_is_not_a_signature() -> None:
    text = (
        "Please look at this.\n-- \n"
        "I never placed order 90120 and the shipping address on it is not mine at all, $64.00."
    )
    assert read(text).current == text


_FORWARD = (
    "\n\n---------- Forwarded message ---------\n"
    "From: {sender}\nDate: Mon, 2 Mar 2026 at 19:40\nSubject: {subject}\n"
    "To: <help@lamps.example>\n\n{body}"
)


@pytest.mark.parametrize(
    "above",
    [
        "Sending this again, nobody answered my previous email.",
        "Ich schicke meine Mail vom Montag erneut, bisher keine Antwort.",
        "Je vous renvoie mon message du 2 mars, toujours rien.",
        "Vuelvo a enviar lo que les escribí el lunes.",
        "Estou reenviando o e-mail que mandei segunda-feira.",
        "Przesyłam ponownie, co pisałem w poniedziałek.",
        "Pazartesi yazdığım maili tekrar gönderiyorum.",
        "أعيد إرسال رسالتي لأن أحداً لم يرد.",
        "先日送ったメールを再送します。",
    ],
)
def test_the_customers_own_earlier_mail_sent_again_is_read(above: str) -> None:
    body = "The desk lamp LM-40417 flickers and went dark. Please refund the 64,00 €."
    said = read(
        above + _FORWARD.format(sender="Jo Park <jo.park@mail.example>", subject="Lamp", body=body)
    )
    assert "LM-40417" in said.current and "64,00 €" in said.current


def test_a_forward_from_the_customers_own_address_or_name_is_theirs() -> None:
    body = "Order LM-40417: the lamp arrived with a cracked shade, refund 64,00 € please."
    mail = "Any news on this?" + _FORWARD.format(
        sender="Joanna Park <jo.park@mail.example>", subject="Lamp", body=body
    )
    assert "LM-40417" not in read(mail).current  # nothing says whose it is
    assert "LM-40417" in read(mail, sender="Jo.Park@mail.example").current
    signed = mail.replace("Any news on this?", "Any news on this?\n\nJoanna")
    assert "LM-40417" in read(signed).current


def test_someone_elses_forwarded_mail_gives_no_field() -> None:
    body = "Your parcel 00340012 is held at the depot. Value declared: 64,00 €."
    said = read(
        "Forwarding what the courier told me. Still no lamp."
        + _FORWARD.format(sender="Courier <noreply@courier.example>", subject="Parcel", body=body)
    )
    assert said.current == "Forwarding what the courier told me. Still no lamp."


@pytest.mark.parametrize(
    "above",
    [
        "Please cancel the order below, I no longer need it.",
        "Bitte die Bestellung unten stornieren.",
        "Annulez la commande ci-dessous s'il vous plaît.",
        "Quiero el reembolso del pedido de abajo.",
        "Aşağıdaki siparişi iptal edin lütfen.",
    ],
)
def test_pointing_at_the_order_below_reads_its_reference_and_amount(above: str) -> None:
    quote = (
        "\n\nOn Mon, 2 Mar 2026, 19:40 Lamps <orders@lamps.example> wrote:\n"
        "> Thank you for your order LM-40417\n> Desk lamp   64,00 €\n> Total   64,00 €"
    )
    said = read(above + quote)
    assert "LM-40417" in said.current and "64,00 €" in said.current


def test_a_bare_see_below_reads_the_reference_but_not_an_amount() -> None:
    quote = (
        "\n\nOn Mon, 2 Mar 2026, 19:40 Lamps <orders@lamps.example> wrote:\n"
        "> Thank you for your order LM-40417 of 64,00 €, shipping 5,00 €."
    )
    said = read("Still nothing here, see below. I want my money back." + quote)
    assert "LM-40417" in said.current
    assert "64,00" not in said.current and "5,00" not in said.current
