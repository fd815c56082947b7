"""The ``web`` suite's task definitions, read by ``scripts/make_web_tasks.py``.

Each task: ``id``, ``app`` (a ``tasks/webapps`` app), ``instruction``, ``steps`` (``("click",
LABEL)`` with an element's ``data-label``, ``("type", TEXT)``, ``("press", KEYS)``), the
``page_state`` expectations (``expect``, optional ``checks``) and an optional ``seed`` (the
app's content instead of its default).
"""

from __future__ import annotations

from typing import Any

CHAIRS = {
    "title": "ForgeShop: office",
    "products": [
        {"id": 1, "name": "Office chair Pro", "price": 189.0, "category": "chairs"},
        {"id": 2, "name": "Chair mat", "price": 25.0, "category": "floor"},
        {"id": 3, "name": "Office chair Basic", "price": 79.0, "category": "chairs"},
        {"id": 4, "name": "Office chair Mesh", "price": 129.0, "category": "chairs"},
        {"id": 5, "name": "Footrest", "price": 30.0, "category": "ergonomics"},
        {"id": 6, "name": "Monitor arm", "price": 64.0, "category": "ergonomics"},
    ],
}

CATALOGUE = {
    "title": "ForgeShop: home",
    "products": [
        {"id": 1, "name": "Bath towel", "price": 14.0, "category": "bath"},
        {"id": 2, "name": "Hand towel", "price": 7.5, "category": "bath"},
        {"id": 3, "name": "Shower curtain", "price": 18.0, "category": "bath"},
        {"id": 4, "name": "Soap dish", "price": 5.2, "category": "bath"},
        {"id": 5, "name": "Table lamp", "price": 27.0, "category": "living"},
        {"id": 6, "name": "Cushion, grey", "price": 12.0, "category": "living"},
        {"id": 7, "name": "Throw blanket", "price": 29.0, "category": "living"},
        {"id": 8, "name": "Photo frame", "price": 9.9, "category": "living"},
        {"id": 9, "name": "Candle set", "price": 11.5, "category": "living"},
        {"id": 10, "name": "Doormat", "price": 16.0, "category": "hall"},
        {"id": 11, "name": "Coat hooks", "price": 8.8, "category": "hall"},
        {"id": 12, "name": "Wall clock", "price": 22.0, "category": "living"},
        {"id": 13, "name": "Key bowl", "price": 4.3, "category": "hall"},
    ],
}

TASKS: list[dict[str, Any]] = [
    # -- shop -----------------------------------------------------------------------------
    {
        "id": "shop_blue_mug",
        "app": "shop",
        "instruction": "In the shop, order one Blue mug (place the order).",
        "steps": [("click", "add:Blue mug"), ("click", "order")],
        "expect": {"orders.length": 1, "orders[0].items.length": 1,
                   "orders[0].items[0].name": "Blue mug", "orders[0].items[0].qty": 1},
    },
    {
        "id": "shop_cheapest_mug",
        "app": "shop",
        "instruction": "Order the cheapest mug the shop sells, one of it, and nothing else.",
        "steps": [("click", "add:Red mug"), ("click", "order")],
        "expect": {"orders.length": 1, "orders[0].items.length": 1,
                   "orders[0].items[0].name": "Red mug", "orders[0].items[0].qty": 1},
    },
    {
        "id": "shop_search_cheapest_tea",
        "app": "shop",
        "instruction": "Search the shop for tea and order one pack of the cheapest tea (a tea to "
        "drink, not a kettle).",
        "steps": [("click", "search"), ("type", "tea"), ("click", "add:Black tea, 50 bags"),
                  ("click", "order")],
        "expect": {"orders.length": 1, "orders[0].items.length": 1,
                   "orders[0].items[0].name": "Black tea, 50 bags"},
    },
    {
        "id": "shop_two_notebooks",
        "app": "shop",
        "instruction": "Order two Notebook A5 in a single order.",
        "steps": [("click", "add:Notebook A5"), ("click", "add:Notebook A5"), ("click", "order")],
        "expect": {"orders.length": 1, "orders[0].items.length": 1,
                   "orders[0].items[0].name": "Notebook A5", "orders[0].items[0].qty": 2},
    },
    {
        "id": "shop_lamp_and_cable",
        "app": "shop",
        "instruction": "Buy a Desk lamp and a USB cable, one of each, together in one order.",
        "steps": [("click", "add:Desk lamp"), ("click", "add:USB cable"), ("click", "order")],
        "expect": {"orders.length": 1, "orders[0].items.length": 2, "orders[0].total": 37.3},
    },
    {
        "id": "shop_everything_under_5",
        "app": "shop",
        "instruction": "Order one of every product that costs less than $5, all in one order.",
        "steps": [("click", "add:Green tea, 50 bags"), ("click", "add:Black tea, 50 bags"),
                  ("click", "order")],
        "expect": {"orders.length": 1, "orders[0].items.length": 2, "orders[0].total": 8.7},
    },
    {
        "id": "shop_fix_the_cart",
        "app": "shop",
        "instruction": "Put a Green mug and a Tea kettle in the cart, then change your mind: "
        "remove the kettle and order only the Green mug.",
        "steps": [("click", "add:Green mug"), ("click", "add:Tea kettle"),
                  ("click", "remove:Tea kettle"), ("click", "order")],
        "expect": {"orders.length": 1, "orders[0].items.length": 1,
                   "orders[0].items[0].name": "Green mug"},
    },
    {
        "id": "shop_cheapest_office_chair",
        "app": "shop",
        "seed": CHAIRS,
        "instruction": "Order the cheapest office chair in the shop (a chair, not an accessory).",
        "steps": [("click", "add:Office chair Basic"), ("click", "order")],
        "expect": {"orders.length": 1, "orders[0].items.length": 1,
                   "orders[0].items[0].name": "Office chair Basic"},
    },
    {
        "id": "shop_scroll_wall_clock",
        "app": "shop",
        "seed": CATALOGUE,
        "instruction": "Order one Wall clock. The product list is longer than the screen.",
        "steps": [("scroll", "list", 2), ("click", "add:Wall clock"), ("click", "order")],
        "expect": {"orders.length": 1, "orders[0].items.length": 1,
                   "orders[0].items[0].name": "Wall clock"},
    },
    {
        "id": "shop_scroll_cheapest_item",
        "app": "shop",
        "seed": CATALOGUE,
        "instruction": "Order the cheapest product in the whole shop (look at every product, "
        "the list scrolls), one of it.",
        "steps": [("scroll", "list", 3), ("click", "add:Key bowl"), ("click", "order")],
        "expect": {"orders.length": 1, "orders[0].items.length": 1,
                   "orders[0].items[0].name": "Key bowl"},
    },
    # -- mail -----------------------------------------------------------------------------
    {
        "id": "mail_send_slides",
        "app": "mail",
        "instruction": "Send an email to ben@forge.test with the subject 'Slides' and the "
        "message 'Slides attached.'",
        "steps": [("click", "compose"), ("click", "to"), ("type", "ben@forge.test"),
                  ("click", "subject"), ("type", "Slides"), ("click", "body"),
                  ("type", "Slides attached."), ("click", "send")],
        "expect": {"sent.length": 1, "sent[0].to": "ben@forge.test", "sent[0].subject": "Slides",
                   "sent[0].body": "Slides attached."},
    },
    {
        "id": "mail_reply_lunch",
        "app": "mail",
        "instruction": "Ana asked whether you want lunch on Thursday. Reply to her mail (use "
        "Reply) and say yes.",
        "steps": [("click", "mail:m1"), ("click", "reply"), ("click", "body"),
                  ("type", "Yes, see you at 12:30."), ("click", "send")],
        "expect": {"sent.length": 1, "sent[0].to": "ana@forge.test",
                   "sent[0].subject": "Re: Lunch on Thursday?"},
        "checks": [{"path": "sent[0].body", "contains": "yes", "ignore_case": True}],
    },
    {
        "id": "mail_archive_newsletters",
        "app": "mail",
        "instruction": "Archive every mail from the newsletter news@deals.test, and no other "
        "mail.",
        "steps": [("click", "mail:m2"), ("click", "archive"), ("click", "mail:m5"),
                  ("click", "archive")],
        "expect": {"archived.length": 2, "sent.length": 0},
        "checks": [{"path": "archived", "contains": "m2"}, {"path": "archived", "contains": "m5"}],
    },
    {
        "id": "mail_archive_password",
        "app": "mail",
        "instruction": "Archive the mail about your password expiring.",
        "steps": [("click", "mail:m6"), ("click", "archive")],
        "expect": {"archived": ["m6"]},
    },
    {
        "id": "mail_forward_room_code",
        "app": "mail",
        "instruction": "Carla mailed the code of the room for the offsite. Email ben@forge.test "
        "with the subject 'Offsite room code' and only the code as the message.",
        "steps": [("click", "mail:m7"), ("click", "compose"), ("click", "to"),
                  ("type", "ben@forge.test"), ("click", "subject"), ("type", "Offsite room code"),
                  ("click", "body"), ("type", "4417"), ("click", "send")],
        "expect": {"sent.length": 1, "sent[0].to": "ben@forge.test",
                   "sent[0].subject": "Offsite room code", "sent[0].body": "4417"},
    },
    {
        "id": "mail_ask_billing",
        "app": "mail",
        "instruction": "Write to the address that sent you the invoice for March: subject "
        "'Invoice 2291', message 'Please send a copy of invoice 2291.'",
        "steps": [("click", "compose"), ("click", "to"), ("type", "billing@cloudhost.test"),
                  ("click", "subject"), ("type", "Invoice 2291"), ("click", "body"),
                  ("type", "Please send a copy of invoice 2291."), ("click", "send")],
        "expect": {"sent.length": 1, "sent[0].to": "billing@cloudhost.test",
                   "sent[0].subject": "Invoice 2291"},
        "checks": [{"path": "sent[0].body", "contains": "2291"}],
    },
    {
        "id": "mail_budget_signoff",
        "app": "mail",
        "instruction": "Dan's mail about the budget names who must sign it off. Email that "
        "address with the subject 'Budget sign-off' asking them to sign off the budget.",
        "steps": [("click", "mail:m8"), ("click", "compose"), ("click", "to"),
                  ("type", "finance@forge.test"), ("click", "subject"),
                  ("type", "Budget sign-off"), ("click", "body"),
                  ("type", "Could you sign off the budget, please?"), ("click", "send")],
        "expect": {"sent.length": 1, "sent[0].to": "finance@forge.test",
                   "sent[0].subject": "Budget sign-off"},
    },
    # -- booking --------------------------------------------------------------------------
    {
        "id": "booking_tuesday_ten",
        "app": "booking",
        "instruction": "Book the meeting room on Tuesday at 10:00 in the name of Ana.",
        "steps": [("click", "name"), ("type", "Ana"), ("click", "slot:Tue 10:00"),
                  ("click", "book")],
        "expect": {"bookings": [{"name": "Ana", "day": "Tue", "time": "10:00"}]},
    },
    {
        "id": "booking_earliest_wednesday",
        "app": "booking",
        "instruction": "Book the earliest free slot on Wednesday for Bo Chen.",
        "steps": [("click", "name"), ("type", "Bo Chen"), ("click", "slot:Wed 13:00"),
                  ("click", "book")],
        "expect": {"bookings": [{"name": "Bo Chen", "day": "Wed", "time": "13:00"}]},
    },
    {
        "id": "booking_last_thursday_morning",
        "app": "booking",
        "instruction": "Book the latest free slot on Thursday morning (before noon) for Carla.",
        "steps": [("click", "name"), ("type", "Carla"), ("click", "slot:Thu 11:00"),
                  ("click", "book")],
        "expect": {"bookings": [{"name": "Carla", "day": "Thu", "time": "11:00"}]},
    },
    {
        "id": "booking_friday_afternoon",
        "app": "booking",
        "instruction": "Friday afternoon has only one free slot. Book it for Dan.",
        "steps": [("click", "name"), ("type", "Dan"), ("click", "slot:Fri 13:00"),
                  ("click", "book")],
        "expect": {"bookings": [{"name": "Dan", "day": "Fri", "time": "13:00"}]},
    },
    {
        "id": "booking_two_monday_slots",
        "app": "booking",
        "instruction": "Book two slots for Eve: Monday 11:00 and Monday 13:00.",
        "steps": [("click", "name"), ("type", "Eve"), ("click", "slot:Mon 11:00"),
                  ("click", "book"), ("click", "slot:Mon 13:00"), ("click", "book")],
        "expect": {"bookings.length": 2, "bookings[0].name": "Eve", "bookings[1].name": "Eve"},
        "checks": [
            {"path": "bookings", "contains": {"name": "Eve", "day": "Mon", "time": "11:00"}},
            {"path": "bookings", "contains": {"name": "Eve", "day": "Mon", "time": "13:00"}},
        ],
    },
    # -- calendar -------------------------------------------------------------------------
    {
        "id": "calendar_move_dentist",
        "app": "calendar",
        "instruction": "Move the Dentist appointment to Thursday, keeping its time.",
        "steps": [("click", "event:Dentist@Tue 16:00"), ("click", "day:Thu"), ("click", "save")],
        "expect": {"events.length": 7, "events[1].title": "Dentist", "events[1].day": "Thu",
                   "events[1].start": "16:00"},
    },
    {
        "id": "calendar_gym_later",
        "app": "calendar",
        "instruction": "The gym session on Thursday now starts at 19:00. Update the calendar.",
        "steps": [("click", "event:Gym@Thu 18:00"), ("click", "start"), ("press", "ctrl+a"),
                  ("type", "19:00"), ("click", "save")],
        "expect": {"events[4].title": "Gym", "events[4].day": "Thu", "events[4].start": "19:00"},
    },
    {
        "id": "calendar_delete_lunch",
        "app": "calendar",
        "instruction": "The team lunch is cancelled: delete it from the calendar.",
        "steps": [("click", "event:Team lunch@Fri 12:30"), ("click", "delete")],
        "expect": {"events.length": 6, "deleted": ["Team lunch"]},
    },
    {
        "id": "calendar_new_call",
        "app": "calendar",
        "instruction": "Add an event titled 'Call with Ana' on Wednesday at 14:00.",
        "steps": [("click", "new"), ("click", "title"), ("type", "Call with Ana"),
                  ("click", "day:Wed"), ("click", "start"), ("press", "ctrl+a"),
                  ("type", "14:00"), ("click", "save")],
        "expect": {"events.length": 8, "events[7].title": "Call with Ana",
                   "events[7].day": "Wed", "events[7].start": "14:00"},
    },
    {
        "id": "calendar_rename_review",
        "app": "calendar",
        "instruction": "Rename the 'Design review' event to 'Design review (remote)'.",
        "steps": [("click", "event:Design review@Wed 11:00"), ("click", "title"),
                  ("press", "End"), ("type", " (remote)"), ("click", "save")],
        "expect": {"events[2].title": "Design review (remote)", "events[2].day": "Wed",
                   "events[2].start": "11:00", "events.length": 7},
    },
    {
        "id": "calendar_wednesday_standup",
        "app": "calendar",
        "instruction": "Move Wednesday's standup to 10:00 the same day. Leave Monday's standup "
        "as it is.",
        "steps": [("click", "event:Standup@Wed 09:30"), ("click", "start"), ("press", "ctrl+a"),
                  ("type", "10:00"), ("click", "save")],
        "expect": {"events[3].day": "Wed", "events[3].start": "10:00", "events[0].day": "Mon",
                   "events[0].start": "09:30"},
    },
    # -- bank -----------------------------------------------------------------------------
    {
        "id": "bank_pay_power_bill",
        "app": "bank",
        "instruction": "Pay the City Power bill: $64.20 from Checking, with the reference "
        "INV-5531.",
        "steps": [("click", "from:Checking"), ("click", "to:City Power"), ("click", "amount"),
                  ("type", "64.20"), ("click", "reference"), ("type", "INV-5531"),
                  ("click", "send")],
        "expect": {"transfers": [{"from": "Checking", "to": "City Power", "amount": 64.2,
                                  "reference": "INV-5531"}]},
    },
    {
        "id": "bank_move_to_savings",
        "app": "bank",
        "instruction": "Move $250 from your Checking account to your Savings account.",
        "steps": [("click", "from:Checking"), ("click", "to:Savings"), ("click", "amount"),
                  ("type", "250"), ("click", "send")],
        "expect": {"transfers.length": 1, "balances.Checking": 990, "balances.Savings": 5550},
    },
    {
        "id": "bank_pay_ana_back",
        "app": "bank",
        "instruction": "Pay Ana Lopez back $12.50 for lunch, from Checking, with the reference "
        "'lunch'.",
        "steps": [("click", "from:Checking"), ("click", "to:Ana Lopez"), ("click", "amount"),
                  ("type", "12.50"), ("click", "reference"), ("type", "lunch"),
                  ("click", "send")],
        "expect": {"transfers.length": 1, "transfers[0].to": "Ana Lopez",
                   "transfers[0].amount": 12.5, "transfers[0].from": "Checking"},
        "checks": [{"path": "transfers[0].reference", "contains": "lunch", "ignore_case": True}],
    },
    {
        "id": "bank_rent_from_the_right_account",
        "app": "bank",
        "instruction": "Pay $1,500 of rent to R. Smith from whichever of your accounts has "
        "enough money for it.",
        "steps": [("click", "from:Savings"), ("click", "to:R. Smith (rent)"),
                  ("click", "amount"), ("type", "1500"), ("click", "send")],
        "expect": {"transfers.length": 1, "transfers[0].from": "Savings",
                   "transfers[0].to": "R. Smith (rent)", "transfers[0].amount": 1500},
    },
    {
        "id": "bank_phone_bill_from_savings",
        "app": "bank",
        "instruction": "Pay Phone Co $39.99 from your Savings account.",
        "steps": [("click", "from:Savings"), ("click", "to:Phone Co"), ("click", "amount"),
                  ("type", "39.99"), ("click", "send")],
        "expect": {"transfers.length": 1, "transfers[0].to": "Phone Co",
                   "transfers[0].amount": 39.99, "balances.Savings": 5260.01},
    },
]  # fmt: skip
