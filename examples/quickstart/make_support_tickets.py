#!/usr/bin/env python3
"""Generates the quickstart's customer-support ticket dataset.

Writes train.jsonl, val.jsonl and test.jsonl into --out, one {"message": ..., "label": ...}
object per line. Messages are composed from varied templates, product names, order numbers,
dates, amounts, greetings and sign-offs, with typos and casing noise.

The raw train set is deliberately messy, as real ticket exports are: it holds near-duplicates,
exact duplicates and low-quality rows (very short, empty-ish, all caps, gibberish, another
language, some with a wrong label). The quickstart shows them; a data-preparation step cleans
them. val.jsonl and test.jsonl are clean: no junk, no typos, no duplicates, and no message that
also appears in train.

Standard library only. The same --seed gives byte-identical files.

    python3 examples/quickstart/make_support_tickets.py --out data/support --seed 7
"""

import argparse
import json
import os
import random
import sys

INTENTS = [
    "shipping_delay",
    "refund_request",
    "account_access",
    "billing_error",
    "product_defect",
    "cancel_subscription",
    "change_address",
    "product_question",
]

# Relative frequency of each intent (real queues are not balanced).
WEIGHTS = {
    "shipping_delay": 20,
    "refund_request": 16,
    "account_access": 14,
    "billing_error": 12,
    "product_defect": 14,
    "cancel_subscription": 10,
    "change_address": 7,
    "product_question": 7,
}

DEVICES = [
    "Aurora desk lamp", "PureBrew coffee grinder", "Vertex wireless earbuds", "Orbit smart watch",
    "Lumen e-reader", "Breeze tower fan", "Echo bluetooth speaker", "Pixel kids tablet",
    "Spark electric kettle",
]
PRODUCTS = DEVICES + [
    "TrailMax hiking boots", "Nimbus rain jacket", "Cascade water bottle", "Summit backpack",
    "Harbor throw blanket", "Forge cast iron pan", "Glide office chair", "Nova phone case",
    "Tundra sleeping bag", "Zen yoga mat", "Atlas road bike helmet",
]
CARRIERS = ["UPS", "FedEx", "DHL", "USPS", "the courier", "Royal Mail"]
PLANS = ["Premium", "Plus", "Family", "Pro", "Basic", "annual", "monthly"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December"]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
FIRST_NAMES = ["Maria", "James", "Aisha", "Chen", "Lukas", "Priya", "Tom", "Sofia", "Diego",
               "Emma", "Kenji", "Fatima", "Olivia", "Noah", "Ines", "Raj", "Hannah", "Marco"]
LAST_INITIALS = "ABCDEFGHJKLMNPRSTW"
STREETS = ["Maple Street", "Oak Avenue", "Harbor Road", "Elm Drive", "Station Lane",
           "Park Boulevard", "Mill Road", "Cedar Court"]
CITIES = ["Portland", "Austin", "Leeds", "Denver", "Lyon", "Toronto", "Dublin", "Madison"]

GREETINGS = ["Hi,", "Hello,", "Hi there,", "Hey,", "Good morning,", "Dear support,",
             "Hello team,", "To whom it may concern,", "Hiya,", "Good afternoon,"]
SIGNOFFS = ["Thanks,", "Thank you,", "Regards,", "Best,", "Cheers,", "Kind regards,",
            "Thanks in advance,", "Many thanks,"]
CLOSERS = ["Please help.", "Can you look into this?", "Any update would be appreciated.",
           "This is really frustrating.", "I need this sorted asap.",
           "Hope you can help.", "Please get back to me soon.", "Thanks for your help."]

TEMPLATES = {
    "shipping_delay": [
        "My order {order} was supposed to arrive on {date} and it still hasn't shown up.",
        "Where is my package? Order {order}, placed {days} days ago, tracking hasn't moved.",
        "The tracking for {order} has said 'in transit' since {date}. When will it arrive?",
        "I ordered the {product} on {date} and I'm still waiting for it.",
        "{carrier} says my parcel is delayed. Order number {order}. Any idea when it will come?",
        "It's been {days} days and my {product} has not been delivered yet.",
        "Order {order} shows as shipped but nothing has arrived. The estimated date was {date}.",
        "My delivery is late again. I was promised the {product} by {weekday}.",
        "Tracking for order {order} hasn't updated in a week. Is it lost?",
        "Still no sign of my {product}. Can you check what's going on with {order}?",
        "The delivery window for {order} passed yesterday and nobody came.",
        "I paid for express shipping on {order} but it's now {days} days late.",
    ],
    "refund_request": [
        "I returned the {product} on {date} and still haven't got my refund of {amount}.",
        "I'd like a refund for order {order}, the {product} isn't what I expected.",
        "Please refund the {amount} for my order {order}. I sent the item back last week.",
        "Can I get my money back for the {product}? I don't want it anymore.",
        "You confirmed my return for {order} but the refund of {amount} never came through.",
        "I want to return the {product} and get a full refund.",
        "How long does a refund take? I returned {order} {days} days ago.",
        "The {product} arrived too late for the event, so I would like a refund please.",
        "Requesting a refund for order {order}. The item was never used.",
        "I was told I'd receive {amount} back within 5 days. It has been {days}.",
        "Please process a refund for the {product}, it's still in the original box.",
    ],
    "account_access": [
        "I can't log in to my account. It keeps saying my password is wrong.",
        "I forgot my password and the reset email never arrives at {email}.",
        "My account is locked after too many login attempts. How do I unlock it?",
        "The password reset link says it has expired every time I click it.",
        "I can't get past the two-factor step, my code is never accepted.",
        "I changed my phone number and now I can't receive the login code.",
        "Someone may have accessed my account, I got an email about a login from another city.",
        "The app logs me out every few minutes and I can't sign back in.",
        "I'm trying to sign in with {email} but it says no account exists.",
        "My account was suspended and I don't know why. Please restore access.",
        "Reset password isn't working, I have tried {days} times.",
    ],
    "billing_error": [
        "I was charged twice for order {order}, {amount} each time.",
        "My card was billed {amount} but my plan only costs less than that.",
        "There's a charge of {amount} on my statement from you that I don't recognise.",
        "I was charged for the {plan} plan but I'm on the Basic plan.",
        "The invoice for {month} shows the wrong amount, it should be lower.",
        "You charged my card ending in {last4} after I updated my payment details.",
        "I used a discount code but was charged the full price of {amount}.",
        "Why did my bill go up to {amount} this month? Nothing changed on my account.",
        "I got billed on {date} even though my free trial should still be running.",
        "Double charge on my credit card for the {product}. Please fix.",
        "The tax on my invoice looks wrong, I was charged {amount} extra.",
    ],
    "product_defect": [
        "The {product} I received is broken, the {part} came cracked.",
        "My {product} stopped working after {days} days.",
        "The {device} won't turn on at all, even after charging it overnight.",
        "The {part} on my {product} fell off the first time I used it.",
        "I received a damaged {product}. The box was fine but the item is scratched.",
        "My {device} makes a loud noise and smells like burning plastic.",
        "The {product} is defective, the {part} doesn't work.",
        "Item from order {order} arrived faulty. The {part} is loose.",
        "The {device} keeps disconnecting and the battery drains in an hour.",
        "Quality problem: the stitching on my {product} came apart after one week.",
        "The {product} arrived with a missing {part}.",
    ],
    "cancel_subscription": [
        "Please cancel my {plan} subscription, I don't use it anymore.",
        "How do I cancel my membership? I can't find the option in the app.",
        "I want to cancel before the next renewal on {date}.",
        "Cancel my subscription effective immediately please.",
        "I'd like to stop my {plan} plan at the end of this billing period.",
        "Please don't renew my subscription, I want to end it.",
        "I signed up for the trial and want to cancel before I get charged.",
        "Stop my monthly box, I'm moving and won't need it.",
        "How can I unsubscribe from the {plan} plan and close my account?",
        "I tried to cancel online but it keeps failing. Please cancel it for me.",
    ],
    "change_address": [
        "I need to change the delivery address for order {order} to {address}.",
        "I moved last week. Can you update my shipping address to {address}?",
        "Wrong address on order {order}, it should go to {address} instead.",
        "Please ship my {product} to my work address: {address}.",
        "Can I still change where order {order} is delivered? New address is {address}.",
        "I typed my street wrong at checkout, the correct address is {address}.",
        "Update my default address to {address} please.",
    ],
    "product_question": [
        "Does the {product} come with a warranty?",
        "Is the {product} compatible with {other}?",
        "What size should I get for the {product}? I'm usually a medium.",
        "Is the {product} back in stock soon?",
        "Can the {product} go in the dishwasher or washing machine?",
        "How long does the battery on the {device} last?",
        "Is the {product} available in black?",
        "Do you ship the {product} to Canada?",
        "What's the difference between the {product} and the {other}?",
    ],
}

PARTS = ["handle", "lid", "zipper", "screen", "switch", "strap", "power cable", "hinge",
         "button", "charging port", "base", "buckle"]

# Low-quality rows of the raw train set.
SHORT = ["help", "hi", "??", "order", "refund", "not working", "login", "hello?", "pls help",
         "cancel", "urgent", "ok", "yes", "thanks"]
EMPTYISH = ["", " ", ".", "...", "-", "n/a", "null", "  \t ", "?"]
FOREIGN = [
    ("Hola, mi pedido no ha llegado todavía. ¿Dónde está?", "shipping_delay"),
    ("Bonjour, je voudrais être remboursé pour ma commande.", "refund_request"),
    ("Ich kann mich nicht in mein Konto einloggen.", "account_access"),
    ("Mi hanno addebitato due volte lo stesso ordine.", "billing_error"),
    ("O produto chegou quebrado.", "product_defect"),
    ("Bitte kündigen Sie mein Abonnement.", "cancel_subscription"),
    ("Mijn pakket is nog steeds niet bezorgd.", "shipping_delay"),
    ("Je n'arrive pas à réinitialiser mon mot de passe.", "account_access"),
]


def slot_values(rng):
    """Random but plausible values for the slots of one ticket's templates."""
    day = rng.randint(1, 28)
    device = rng.choice(DEVICES)
    return {
        "order": rng.choice(["#", "", "ORD-", "#A"]) + str(rng.randint(100000, 999999)),
        "date": rng.choice([
            f"{rng.choice(MONTHS)} {day}",
            f"{day} {rng.choice(MONTHS)}",
            f"{rng.randint(1, 12)}/{day}",
            rng.choice(WEEKDAYS),
            "last week",
        ]),
        "days": str(rng.randint(3, 30)),
        "amount": rng.choice(["$", "€", "£"]) + f"{rng.randint(5, 400)}.{rng.randint(0, 99):02d}",
        "product": device if rng.random() < 0.4 else rng.choice(PRODUCTS),
        "device": device,
        "other": rng.choice(PRODUCTS),
        "carrier": rng.choice(CARRIERS),
        "plan": rng.choice(PLANS),
        "month": rng.choice(MONTHS),
        "weekday": rng.choice(WEEKDAYS),
        "last4": f"{rng.randint(0, 9999):04d}",
        "part": rng.choice(PARTS),
        "email": rng.choice(FIRST_NAMES).lower() + str(rng.randint(1, 99)) + "@example.com",
        "address": f"{rng.randint(1, 250)} {rng.choice(STREETS)}, {rng.choice(CITIES)}",
    }


def typo(rng, text):
    """One keyboard slip: a swapped, dropped or doubled letter."""
    positions = [i for i in range(1, len(text) - 1) if text[i].isalpha() and text[i + 1].isalpha()]
    if not positions:
        return text
    i = rng.choice(positions)
    kind = rng.randrange(3)
    if kind == 0:
        return text[:i] + text[i + 1] + text[i] + text[i + 2:]
    if kind == 1:
        return text[:i] + text[i + 1:]
    return text[:i] + text[i] + text[i:]


def compose(rng, intent, noisy):
    """A ticket message for `intent`; `noisy` adds typos and casing noise."""
    values = slot_values(rng)
    first, second = rng.sample(TEMPLATES[intent], 2)
    body = first.format(**values)
    if rng.random() < 0.3:
        body += " " + second.format(**values)  # a second detail about the same order
    parts = []
    if rng.random() < 0.55:
        parts.append(rng.choice(GREETINGS))
    parts.append(body)
    if rng.random() < 0.3:
        parts.append(rng.choice(CLOSERS))
    if rng.random() < 0.4:
        name = rng.choice(FIRST_NAMES)
        if rng.random() < 0.5:
            name += " " + rng.choice(LAST_INITIALS) + "."
        parts.append(rng.choice(SIGNOFFS) + " " + name)
    text = " ".join(parts)
    if noisy:
        for _ in range(rng.choice([0, 0, 0, 1, 1, 2])):
            text = typo(rng, text)
        r = rng.random()
        if r < 0.15:
            text = text.lower()
        elif r < 0.2:
            text = text.rstrip(".!?")
        elif r < 0.25:
            text = text.replace(". ", ".  ")
    return text


def pick_intent(rng):
    return rng.choices(INTENTS, weights=[WEIGHTS[i] for i in INTENTS])[0]


def normalized(text):
    return " ".join(text.lower().split())


def clean_split(rng, n, taken):
    """n clean rows whose messages are new (not in `taken`, which grows)."""
    rows = []
    while len(rows) < n:
        intent = pick_intent(rng)
        message = compose(rng, intent, noisy=False)
        key = normalized(message)
        if key in taken:
            continue
        taken.add(key)
        rows.append({"message": message, "label": intent})
    return rows


def raw_train(rng, n, held_out):
    """n raw train rows: mostly good, with duplicates and junk mixed in."""
    rows = []
    seen = set()
    while len(rows) < n:
        r = rng.random()
        if rows and r < 0.04:
            # Near-duplicate: the same ticket sent again with a small change.
            base = rng.choice(rows)
            message = base["message"]
            change = rng.randrange(4)
            if change == 0:
                message = typo(rng, message)
            elif change == 1:
                message = message + rng.choice([" !!", " Please reply.", " (2nd request)", "??"])
            elif change == 2:
                message = message.lower()
            else:
                message = rng.choice(["Re: ", "Fwd: ", "Follow up: "]) + message
            rows.append({"message": message, "label": base["label"]})
            continue
        if rows and r < 0.055:
            rows.append(dict(rng.choice(rows)))  # exact duplicate
            continue
        if r < 0.075:
            rows.append({"message": rng.choice(SHORT), "label": pick_intent(rng)})
            continue
        if r < 0.085:
            rows.append({"message": rng.choice(EMPTYISH), "label": pick_intent(rng)})
            continue
        if r < 0.1:
            intent = pick_intent(rng)
            message = compose(rng, intent, noisy=False)
            if normalized(message) in held_out:
                continue
            rows.append({"message": message.upper(), "label": intent})
            continue
        if r < 0.11:
            length = rng.randint(2, 8)
            words = ["".join(rng.choice("asdfghjklqwertzuiopyxcvbnm") for _ in
                             range(rng.randint(2, 9))) for _ in range(length)]
            rows.append({"message": " ".join(words), "label": pick_intent(rng)})
            continue
        if r < 0.12:
            message, intent = rng.choice(FOREIGN)
            rows.append({"message": message, "label": intent})
            continue
        intent = pick_intent(rng)
        message = compose(rng, intent, noisy=True)
        key = normalized(message)
        if key in held_out or key in seen:
            continue
        seen.add(key)
        if rng.random() < 0.01:  # a mislabelled ticket, as human triage produces
            intent = rng.choice([i for i in INTENTS if i != intent])
        rows.append({"message": message, "label": intent})
    return rows


def write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                      "data"),
                        help="output directory (default: data/ beside this script)")
    parser.add_argument("--train", type=int, default=2000, help="raw train rows (default 2000)")
    parser.add_argument("--val", type=int, default=200, help="validation rows (default 200)")
    parser.add_argument("--test", type=int, default=200, help="test rows (default 200)")
    parser.add_argument("--seed", type=int, default=7, help="random seed (default 7)")
    args = parser.parse_args(argv)
    for name in ("train", "val", "test"):
        if getattr(args, name) < 0:
            parser.error(f"--{name} must be non-negative")

    # One generator per split, seeded from (seed, split), so changing --train leaves val and
    # test as they were.
    taken = set()
    val = clean_split(random.Random(f"{args.seed}/val"), args.val, taken)
    test = clean_split(random.Random(f"{args.seed}/test"), args.test, taken)
    train = raw_train(random.Random(f"{args.seed}/train"), args.train, taken)

    os.makedirs(args.out, exist_ok=True)
    for name, rows in (("train", train), ("val", val), ("test", test)):
        write_jsonl(os.path.join(args.out, f"{name}.jsonl"), rows)
    counts = {}
    for row in train:
        counts[row["label"]] = counts.get(row["label"], 0) + 1
    print(f"wrote {len(train)} train, {len(val)} val, {len(test)} test rows to {args.out}",
          file=sys.stderr)
    print("train labels: " + ", ".join(f"{k} {counts[k]}" for k in sorted(counts)),
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
