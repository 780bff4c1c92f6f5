"""Write the built-in `support-tickets` dataset (engine/resources/datasets/support_tickets).

Deterministic (seeded): running it again writes the same files byte for byte.
Each class has many hand-written ticket templates; ``[a|b]`` picks one wording and
``{slot}`` fills in a product, amount, order number, date, ... The classes share
vocabulary on purpose (orders, the app, the account, refunds appear in several), so a
classifier has to read the sentence rather than match one keyword.

    .venv/bin/python scripts/make_support_tickets.py [--per-class 160] [--val-fraction 0.2]
"""

from __future__ import annotations

import argparse
import json
import random
import re
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "engine" / "resources" / "datasets" / "support_tickets"
SEED = 20240611

SLOTS: dict[str, list[str]] = {
    "amount": ["$12.99", "$49", "$129.00", "$8.50", "$240", "$19.99", "$74.20", "$5", "$310", "$39.95", "$22"],
    "amount2": ["$15.99", "$59", "$149.00", "$11", "$280", "$24.99", "$89", "$45"],
    "order": ["#48213", "#51907", "#39026", "#60418", "#57731", "#44890", "#62205", "#50076", "#41358", "#59942",
              "#47610", "#63381", "#52849", "#45517", "#61023"],
    "date": ["Monday", "Tuesday", "the 3rd", "March 14", "the 21st", "Friday", "June 2", "the 28th", "October 9",
             "the 12th"],
    "when": ["yesterday", "last week", "two days ago", "on Monday", "last Tuesday", "on the 3rd", "this morning",
             "over the weekend", "on Friday", "a few days ago"],
    "future": ["Friday", "next Monday", "the 15th", "the weekend", "my birthday on the 22nd", "the end of the month",
               "Thursday", "our office opening on the 3rd"],
    "plan": ["Pro plan", "Family plan", "annual subscription", "Basic plan", "premium plan", "monthly plan",
             "Business plan", "Plus subscription"],
    "product": ["doorbell", "indoor camera", "thermostat", "smart plug", "motion sensor", "outdoor camera",
                "door lock", "leak sensor", "light strip", "smoke detector", "window sensor", "garage camera"],
    "camera": ["doorbell", "indoor camera", "outdoor camera", "garage camera", "baby monitor", "floodlight camera"],
    "battery_product": ["doorbell", "motion sensor", "door lock", "leak sensor", "window sensor", "smoke detector",
                        "outdoor camera"],
    "product2": ["smart plug", "motion sensor", "light strip", "leak sensor", "window sensor", "hub"],
    "device": ["iPhone 13", "Pixel 7", "Samsung Galaxy S22", "iPad", "OnePlus phone", "Android tablet",
               "iPhone SE", "Moto G", "old iPhone 8", "Fire tablet"],
    "browser": ["Chrome", "Firefox", "Safari", "Edge", "Chrome on my Chromebook", "Safari on the Mac"],
    "carrier": ["UPS", "FedEx", "DHL", "USPS", "the post office", "Royal Mail", "the local courier"],
    "country": ["Canada", "Ireland", "New Zealand", "Norway", "Mexico", "Portugal", "Australia", "Switzerland",
                "Japan", "Poland"],
    "city": ["Denver", "Leeds", "Toronto", "Austin", "Lyon", "Perth", "Dublin", "Calgary", "Seattle", "Glasgow"],
    "n": ["2", "3", "4", "5", "6", "8", "10"],
    "days": ["three days", "five days", "a week", "ten days", "two weeks", "four days", "eight days"],
    "pct": ["40%", "60%", "75%", "90%", "12%", "99%"],
    "code": ["SPRING20", "WELCOME10", "HOLIDAY15", "FRIEND25", "SAVE30", "BACK2SCHOOL"],
    "err": ["Error 503", "error code E42", "'Something went wrong'", "'Request timed out'", "error 1006",
            "'Unexpected response from server'", "code 0x80070005"],
    "person": ["my partner", "my roommate", "my colleague", "our office manager", "my teenager", "my business partner",
               "the new hire", "my flatmate", "our IT contractor"],
    "feature": ["dark mode", "a weekly summary email", "custom alert sounds", "a Spanish translation",
                "an Apple Watch app", "keyboard shortcuts on the web dashboard", "a desktop app for Linux",
                "a way to group devices by floor", "a larger font option", "a home screen widget for Android"],
    "integration": ["Apple HomeKit", "Google Home", "Alexa", "IFTTT", "Home Assistant", "Zapier", "SmartThings",
                    "Slack", "Microsoft Teams"],
    "language": ["German", "Portuguese", "Japanese", "Dutch", "Polish", "Korean", "Italian"],
}

OPENERS = ["", "", "", "", "", "Hi, ", "Hello, ", "Hi there, ", "Hey, ", "Good morning, ", "Hello team, ",
           "Quick question: ", "Hi support, "]
CLOSERS = ["", "", "", "", "", " Thanks.", " Thank you!", " Thanks in advance.", " Appreciate it.", " Cheers.",
           " Thanks for your help."]

# First words that stay capitalised after an opener ("Hi, FedEx left ...").
KEEP_CAPITAL = {"I", "I'm", "I'd", "I've", "Royal", "PayPal", "Okta", "Windows"}

TEMPLATES: dict[str, list[str]] = {
    "billing": [
        "I was [charged|billed] twice for my {plan} this month. Can you refund the [duplicate|second] payment?",
        "My card was charged {amount} on {date} even though I cancelled the subscription [the week before|days earlier].",
        "Why did my monthly price go from {amount} to {amount2}? I never got a notice about a price change.",
        "Could you send [an invoice|a receipt] with our company VAT number on it for the payment made {when}?",
        "The promo code {code} didn't apply at checkout and I paid full price. Can you credit the difference?",
        "I downgraded to the {plan} [a month ago|last cycle|in January] but I'm still paying the old rate.",
        "There's a {amount} charge from you on my [bank statement|card statement] that I don't recognize.",
        "I returned the {product} on {date} and the refund still hasn't [shown up|landed] on my card.",
        "How do I switch from monthly to yearly payments, and do I get credit for the rest of this [month|billing period]?",
        "The free trial was supposed to last [30 days|a month] but I was charged {amount} after only [two weeks|ten days].",
        "I need copies of every receipt from last year for my [taxes|accountant|expense report]. Where can I download them?",
        "The money left my account ({amount}) but the order page still says payment pending.",
        "Is there a [student|nonprofit|teacher|military] discount on the {plan}?",
        "Can we pay by [bank transfer|direct debit|purchase order] instead of credit card? Our finance team doesn't allow cards.",
        "My card expired; how do I put the new one on file without losing my {plan}?",
        "The invoice shows {amount} in sales tax but we're tax exempt and already sent you the certificate.",
        "I got charged in euros instead of dollars and my bank added a foreign transaction fee [on top|of {amount}].",
        "Please turn off auto-renew on my {plan} before it [bills|charges] me again on {future}.",
        "I got the refund confirmation email {when} but the money never [arrived|appeared|came through].",
        "Your pricing page [says|lists] {amount} a month but checkout asked me for {amount2}.",
        "We have {n} people on the team but the invoice bills us for more seats. Can you fix the seat count?",
        "[PayPal|My bank app] shows the payment as taken but your email says it failed. Which one is right?",
        "I [accidentally|mistakenly] bought the {plan} instead of the one I wanted a few minutes ago, can you reverse it?",
        "What is the 'service adjustment' line on my [last|latest|March] invoice? It added {amount}.",
        "I'm being billed for a second {camera} subscription that I never [set up|asked for].",
        "Will [I be|my card be] charged for the pre-order now or only when it ships?",
        "My payment keeps getting declined at checkout, [yet|but] the same card works everywhere else.",
        "Can the monthly invoice be split between two [cost centres|departments|credit cards]?",
        "I cancelled within the [14-day|30-day] window, so I'd like my {amount} back please.",
        "You charged the old card that I removed [months ago|back in the spring]. How is that possible?",
        "I was promised {pct} off for the first year but the discount disappeared after {n} months.",
        "Can you change the name on the invoices to our [company name|business name] instead of mine?",
        "The renewal charge of {amount} came out [a week|several days] early and overdrew my account.",
        "If I upgrade to the {plan} mid-month, am I charged the full price or just the difference?",
        "My receipt says {amount} but my bank shows {amount2}. Which amount did you actually take?",
        "I paid for express delivery but the order came standard, so I'd like the [shipping fee|extra {amount}] refunded.",
        "Is it possible to pay for the {plan} with a gift card?",
        "We were billed for the {plan} after we closed our account on {date}.",
        "I'd like to move my subscription from my personal card to my company's card.",
        "The checkout page [keeps adding|added] a {amount} fee I can't find explained anywhere.",
        "Can I get a prorated refund if I cancel the annual plan [halfway through|after three months]?",
        "The {amount} store credit from my return isn't showing at checkout.",
        "I have a hold of {amount} on my card from an order that never went through. When is it released?",
        "I'm on the {plan} but got charged the price of the Business tier.",
        "How much will I pay for the {plan} after the introductory price ends?",
        "[Our accountant|My bookkeeper] says the invoice numbers skip from 1043 to 1047. Are two invoices missing?",
        "I was charged {amount} for a {product} that was out of stock and never sent.",
        "Do you offer monthly payments for the {product}, or do I have to pay it all upfront?",
        "I used {person}'s card by mistake for my renewal. Can you refund it and charge mine instead?",
        "The plan says 'billed annually' but I've been charged {amount} every month since {date}.",
        "I was charged the {plan} price on {date} but I'm on the free tier. Please refund the {amount}.",
        "My {plan} renewed at {amount2} instead of the {amount} I agreed to when I signed up.",
        "Could you resend the invoice for order {order}? [Our finance team|My manager] needs it [by {future}|for the audit].",
        "I was charged a {amount} restocking fee on my return of the {product}, which nobody mentioned.",
        "Is the {amount} I paid for the {plan} refundable if I haven't used it [at all|yet]?",
        "My bank flagged your {amount} charge as suspicious. Can you confirm it's really from you?",
        "Why does the app say my {plan} is unpaid when the money left my account {when}?",
        "Can I [pause|freeze] my {plan} for [two months|the summer] instead of paying for it while I'm away?",
        "The gift card I used only covered {amount} of the {amount2} order, and I can't see what happened to the rest.",
        "I've been charged {n} times for the same {camera} cloud storage this [month|year].",
    ],
    "technical_issue": [
        "The app crashes [as soon as|the moment] I open the live view on my {device}.",
        "My {product} keeps going offline every few hours even though the wifi [is fine|is strong in that room].",
        "Since the last update, notifications arrive [ten minutes|half an hour] late or not at all.",
        "The web dashboard is just a blank white page in {browser}.",
        "Firmware update is stuck at {pct} for over an hour. Is it safe to unplug the {product}?",
        "The {product} won't pair with the hub; the light just keeps blinking [blue|orange|white].",
        "Exported [CSV files|reports] have every date shifted by one day.",
        "I get {err} whenever I try to save changes to a schedule.",
        "Night video from the {camera} is really choppy now, it used to be smooth.",
        "The battery in my {battery_product} drains in [two days|a day] since the [update|latest firmware].",
        "Sync between the phone app and the web dashboard stopped working {when}.",
        "The API returns a 500 when I send more than [100|50|250] items in one request.",
        "Motion alerts [go off constantly|keep firing] even when nobody is home.",
        "The thermostat reads about [4|3|5] degrees higher than the thermometer right next to it.",
        "After I sign in, the app just sits on the loading spinner forever on my {device}.",
        "Setup of the {product} fails at the 'connecting to network' step every single time.",
        "Two-way audio on the doorbell has a terrible [echo|delay|crackle].",
        "Search in the app doesn't find any clips older than [a week|three days].",
        "The home screen widget on my {device} still shows yesterday's data.",
        "Uploads fail with 'network error' for any file over about [20|10|50] MB.",
        "[Half of|Most of|All] my smart plugs show as unresponsive since the power cut {when}.",
        "The [reports|history|energy] page takes almost a minute to load now.",
        "Recorded clips from the {camera} play back with no sound at all.",
        "My {product} restarts by itself every night around [2am|3am|midnight].",
        "The app [freezes|hangs] when I try to add a second {product}.",
        "I keep getting {err} when opening the history tab in {browser}.",
        "The {battery_product} shows 'low battery' even with brand new batteries in it.",
        "Schedules I set for the {product} just don't run at the set times.",
        "The live stream drops every [30 seconds|minute or so] on my {device}.",
        "Our webhook stopped receiving events {when}, nothing changed on our end.",
        "The hub's light is solid red and none of my [devices|sensors|plugs] respond.",
        "Temperature graphs are empty for the last {days}.",
        "The app on my {device} logs me out every time I switch to another app and come back.",
        "Automations that worked fine for months stopped triggering after the update {when}.",
        "The door lock says 'jammed' but it's fully locked and works [by hand|with the key].",
        "Geofencing on my {device} doesn't notice when I leave home, so the alarm never arms.",
        "The {product} is very slow to respond, sometimes [10 seconds|half a minute] after I tap.",
        "Scanning the QR code during setup does nothing on my {device}.",
        "Time stamps on the {camera} are an hour off since the clocks changed.",
        "The leak sensor alarm went off for no reason {n} times this week.",
        "The installer for the desktop app fails with {err} on Windows 11.",
        "Snapshots in the daily summary are completely [black|grey|blurry].",
        "The smoke detector chirps every [few minutes|half hour] but the app says everything is normal.",
        "Dashboard charts show the wrong time zone for our [second site|office in {city}].",
        "My {device} can't find the {product} over Bluetooth during setup.",
        "The {product} status flips between online and offline every few seconds in the app.",
        "Adding the {product} to a room gives {err} and it ends up unassigned.",
        "Since the router was replaced {when}, none of my devices reconnect on their own.",
        "The app shows the [door lock|window sensor|garage door] as open when it's definitely closed.",
        "Video from the {camera} has [a green|a purple|an orange] tint since the [update|last firmware update|power cut].",
        "The {camera} shows a black screen in the app, but the status light says it's recording.",
        "Every time I open the app on my {device} it asks me to update, and the update fails with {err}.",
        "The {product} lost all its settings after the power blinked {when}.",
        "Live view on the {camera} works on wifi but never loads over mobile data.",
        "The {product} worked for [a week|a month] and now the app says 'device not found'.",
        "Voice commands to turn off the {product} worked until {when}, now nothing happens.",
        "The app drains my {device} battery even when it's closed, it's the top item in battery usage.",
        "My {product} shows the wrong temperature unit even though I picked Celsius in settings.",
        "When two of us open the {camera} at the same time the stream freezes for both.",
        "The {product} blinks red {n} times and then does nothing; I've tried a reset already.",
    ],
    "account_access": [
        "I can't log in; it says my password is wrong but I [just|only just|literally just] reset it.",
        "The password reset email never arrives, and I've checked [spam|the junk folder|every folder].",
        "I [lost|broke|replaced] my phone and can't get the two-factor codes anymore. How do I get back [in|into my account]?",
        "My account [is locked|got locked|was locked] after too many attempts. How long until I can try again?",
        "Someone changed the email address on my account and now I can't [get in|sign in].",
        "I think my account was [hacked|compromised]; there are sign-ins from a country I've never been to.",
        "How do I make {person} the owner of the account? They're taking over from me.",
        "I signed up with [Google|Facebook|Apple] but now want to sign in with an email and password instead.",
        "The [verification|confirmation|activation] link says it has expired. Can you send a new one?",
        "A former employee still has admin access to our account, please remove [her|him|them].",
        "I [created|ended up with|somehow have] two accounts by mistake. Can you merge them into one?",
        "I changed my email [last month|recently|{when}] and now the login page doesn't recognize me.",
        "The invite link I sent to {person} says it's invalid.",
        "Single sign-on through [Okta|Azure AD|Google Workspace] sends me straight back to the sign-in page in a loop.",
        "Please [delete|close|remove] my account and all the data attached to it.",
        "The codes from my authenticator app are [always|suddenly|now] rejected[| as invalid].",
        "I don't remember which email address I used to [sign up|create the account|register], so I can't log in.",
        "After logging in on my {device} I see someone else's name and devices, not mine.",
        "{person} can't see the cameras I shared with them, it says no permission.",
        "I'm stuck in a loop: it asks for a code, I enter it, and it asks [again|for another one].[| This is on my {device}.]",
        "How do I change the phone number used for [text message codes|sign-in codes]? I have a new number.",
        "My old [work|school|university] email is gone, so I can't receive the reset link. Can you change it for me?",
        "The login page says my account doesn't exist, but I've used it for [years|ages|since 2021].",
        "I keep getting 'session expired' right after entering my password [in {browser}|on my {device}].",
        "Can I remove {person} from my household? They moved out and still have access.",
        "I was signed out on every device {when} and now my password doesn't work.",
        "I got an email {when} saying my password was changed, but I didn't change it.",
        "The 'forgot password' button does nothing when I click it in {browser}.",
        "How do I turn off [two-step verification|the text message codes]? I only use the app at home.",
        "My account was [deactivated|suspended|disabled] without warning. Why, and how do I get it back?",
        "I need admin rights on our team account but the only admin [left the company|is on leave].",
        "The reset code comes by [text|email] but always says it's invalid when I enter it.",
        "Can I change my [username|login name]? I made a typo when I signed up.",
        "{person} never received the invitation email to join our workspace.",
        "I get 'too many requests' every time I try to sign in[| on the {device}| in {browser}].",
        "Please unlink my [Apple ID|Google account|Facebook login] from the account, I want to use my email to sign in.",
        "I can sign in on the web but the app on my {device} says the credentials are wrong.",
        "I used a security key for two-factor and it [broke|got lost|went through the wash]. What are my options?",
        "{person} set up the account with their email; how do I move it to mine?",
        "The security questions you're asking [aren't ones I ever set|don't match anything I chose], so I'm locked out.",
        "Can you [confirm|check] whether an account exists for this email before I sign up again?",
        "I'd like to give {person} view-only access without sharing my password.",
        "Every time I log in I'm asked to verify my identity again, even on the same [laptop|phone].",
        "My account was closed when my card failed. Can I [reopen|restore] it with my old [devices|cameras] still linked?",
        "The sign-in page on my {device} won't accept my password even though {browser} logs in fine.",
        "I reset my password {when} and the new one already doesn't work.",
        "I got a [text|an email] with a login code I never asked for. Is someone trying to get into my account?",
        "Our workspace shows {person} as 'pending' forever, so they can't log in.",
        "My email address has a [plus sign|hyphen|dot] in it and the sign-up form rejects it, so I can't create my login.",
        "I can't get past the captcha on the login page in {browser}, it never accepts my answer.",
        "The app on my {device} says 'account not verified' but I clicked the link {when}.",
        "I can't sign in since {when}; the page says my email isn't registered, which it definitely is.",
        "How do I sign {person} out of my account on a phone they no longer have?",
        "After the update, Face ID sign-in stopped working on my {device} and I don't know my password.",
        "The two-factor text goes to my old number, which I no longer have. How do I get into my account?",
        "I'm the account owner but someone removed my admin rights {when}. Please restore them.",
        "Can I have separate logins for me and {person} on the same household account?",
        "I tried to log in {n} times and now it says my account is temporarily blocked.",
        "The link to set my password for the new account goes to a page that says 'not found'.",
        "My password has a special character and the login form in {browser} won't accept it.",
    ],
    "shipping": [
        "My order {order} was [due|supposed to arrive] {when} and tracking hasn't updated in {days}.",
        "The package shows as delivered but it's not at my door or with any [neighbours|of the neighbours].",
        "Can I change the delivery address on order {order}? I've just moved.",
        "The box arrived crushed and the {product} inside is cracked.",
        "I got a {product2} in the box instead of the {product} I ordered.",
        "Do you ship to {country}? The checkout won't accept my address.",
        "How long does express delivery usually take to {city}?",
        "Tracking says my parcel [is held|has been stuck] at customs [in {country}|for {days}]. Do I have to pay anything?",
        "Only one of the [two|three] items in order {order} arrived.",
        "Can I collect order {order} from a [store|pickup point] instead of having it delivered?",
        "{carrier} left a note but I'm never home during the day. Can they deliver on a Saturday?",
        "I need the {product} before {future}. Is there a faster shipping option?",
        "The return label you sent isn't accepted at the {carrier} drop-off.",
        "Order {order} has said 'label created' for {days} now.",
        "Could order {order} and my other order be combined into a single shipment?",
        "The tracking number for order {order} doesn't work on the {carrier} website.",
        "It's been {days} and my order still hasn't shipped. When will it go out?",
        "Can I add a {product2} to order {order} before it ships?",
        "{carrier} says the address is incomplete. Our building has a [unit|flat|suite] number I forgot to add.",
        "The {product} came without the mounting bracket and screws.",
        "My parcel was sent back to you as undeliverable[| by {carrier}]. Can you send it out again?",
        "Is there a way to ship the {product} as a gift without the receipt inside?",
        "The delivery estimate jumped from {date} to next month. What happened?",
        "The courier left my package out in the rain {when} and the box is soaked.",
        "I ordered {n} {product2}s and only got {n2}.",
        "Can I cancel order {order}? It hasn't shipped yet according to the site.",
        "The parcel is sitting at a {carrier} depot in {city} and hasn't moved.",
        "Do you offer free shipping on orders over a certain amount[| to {country}| to {city}]?",
        "I'm travelling; can you hold the order {order} and ship it after {future}?",
        "The box was opened and taped shut again, and the {product} is missing.",
        "Which courier do you use for {country}? I want to know what to expect at customs.",
        "I returned the {product} {days} ago and tracking shows you received it, but there's no update since.",
        "Order {order} went to my old address even though I updated it in my profile.",
        "Delivery was attempted while I was home, nobody [knocked|rang the bell].",
        "Please ship the replacement {product} to my office instead of my home.",
        "Tracking shows the parcel in {city}, but I live [in a different state|hundreds of miles away].",
        "When will the {product} be back in stock and shipping again?",
        "Can I schedule the delivery of order {order} for a specific day? Nobody's home on weekdays.",
        "I received someone else's order with their name on the label[| instead of my {product}].",
        "My pre-order was supposed to ship {when}; has it gone out yet?",
        "Does the {product} ship in plain packaging? It's a surprise.",
        "The {product} arrived with a dent in the casing, I'd like an exchange.",
        "How do I send back the wrong {product2} you sent me?",
        "Is it possible to ship the {product} to a PO box?",
        "The {carrier} driver handed my parcel to a neighbour I don't know. Which house did it go to?",
        "Order {order} was split into two parcels and the second one never showed up.",
        "Can you ship order {order} by {carrier} instead? They're the only ones who deliver to my village.",
        "The delivery photo for order {order} shows a door that isn't mine.",
        "My {product} is stuck 'in transit' between {city} and the local depot for {days}.",
        "I ordered the {product} with next-day delivery {when} and it still hasn't left the warehouse.",
        "Order {order} says out for delivery since {when}, but nothing has turned up.",
        "Can I get the {product} delivered to {city}? I'm staying there until {future}.",
        "{carrier} wants a signature for order {order} but I'll be at work. Can you waive it?",
        "The tracking for my replacement {product} hasn't moved from '{carrier} received' for {days}.",
        "I paid for two-day shipping {when} and the estimate now says {days}.",
        "Half of order {order} arrived in one box and the {product2} came separately, damaged.",
    ],
    "feature_request": [
        "It would be great if the app had {feature}.",
        "Could you add an option to export reports as [PDF|Excel files]?",
        "Please let us set different schedules for weekdays and weekends[| on the thermostat| for the lights].",
        "Any plans to support {integration}? It's the only thing keeping me from switching fully.",
        "I'd love to share camera access with [family|{person}] without giving them my login.",
        "It would really help if alerts could be snoozed for [an hour|a few hours].",
        "Suggestion: let us rename devices from the web dashboard, not only from the [phone|{device}].",
        "We need an API endpoint to [create|invite|remove] users in bulk.",
        "Please add a {language} version of the app for my parents.",
        "Would you consider {feature}? I'd use it every day.",
        "It would be useful if invoices could be emailed straight to [our accountant|{person}] every month.",
        "Could you send a [text message|push notification] when my order ships, not just an email?",
        "Please support [hardware security keys|passkeys] for two-factor sign-in.",
        "I wish I could set a different motion sensitivity for daytime and night on the {camera}.",
        "It would be nice to see energy use per smart plug over a whole year, not just [30 days|the last month].",
        "Could the [hub|app|light strip] have a 'vacation mode' that runs a random lighting schedule?",
        "Please let me choose which days the weekly [report|summary email] covers.",
        "Would love an integration with {integration} so my team gets alerts there.",
        "Can you make it possible to pin favourite [cameras|devices|rooms] to the top of the list?",
        "Feature idea: a guest code for the door lock that expires automatically [after a day|at a set time].",
        "Please add a way to mute notifications from one {product} without turning it off.",
        "It'd be handy to copy one [room's|thermostat's] schedule to the [other rooms|others].",
        "Could you add support for more than {n} users on the Family plan?",
        "A way to download all my clips [at once|from one day] would save me hours.",
        "We'd like role-based permissions so our [cleaners|dog walker|contractors] can only open the front door.",
        "Any chance of a landscape layout for the app on the {device}?",
        "Please add {feature}, it's the one thing I miss.",
        "It'd be great to set the thermostat from the lock screen of my {device}.",
        "Would it be possible to see the battery level of every [device|sensor] on one screen?",
        "I'd like to be able to draw privacy zones on the {camera} image.",
        "Please let us pick our own notification sound for the [doorbell|smoke detector|leak sensor].",
        "Could you offer an annual plan for the [Business tier|Family plan]? We'd sign up straight away.",
        "Being able to schedule firmware updates [overnight|for the weekend] would avoid surprises during the day.",
        "It would be nice if the app on my {device} remembered the last camera I was watching.",
        "Could you add [audit logs|a history page] showing who changed which setting?",
        "Would you add a simple '[away|leaving]' button that arms everything at once?",
        "I'd love an offline mode so the hub keeps [automations|schedules] running when the internet is down.",
        "Please make the clip timeline [zoomable|easier to scrub], it's hard to find a moment in a long day.",
        "It would help to get a [warning|reminder email] before the free trial ends.",
        "Could you publish a [public status page|status feed] so we know when there's an outage?",
        "Suggestion: allow [two|several] thermostats to follow one shared schedule.",
        "We'd really like [SAML|Okta] single sign-on for our company workspace.",
        "It would be great to filter the event history by [device and by type|room|date range].",
        "Could you let us [set a custom name on shipping labels|add a gift message] for gift orders?",
        "Adding {integration} support would make this a perfect setup for me.",
        "I'd pay extra for a {battery_product} that runs on mains power instead of batteries.",
        "It would be cool if the {battery_product} could trigger the lights when it detects something.",
        "Please consider an option to keep clips for 60 days on the {plan}.",
        "Is {feature} on the roadmap? [Lots of people|Several of us on the forum] have asked for it.",
        "[Request|Idea]: let the [doorbell|hub|app] announce who is at the door by name.",
        "Would love a way to set the {product} to turn off automatically after [ten minutes|an hour].",
        "It would be great if I could see all my {camera} clips on a calendar view.",
        "Could you add a shortcut on the {device} to open the front door camera straight away?",
        "Please add support for {integration} routines so the {product} can be part of them.",
        "An option to share access with {person} for just a weekend would be really useful.",
        "Can you add an 'export my data' button so I can keep a copy of my settings and clips?",
        "I'd like a monthly report of how often the {product} was triggered, emailed to me.",
        "Could the app support {language}? {person} struggles with the English menus.",
        "It would be nice to control the {product} from the web dashboard, not only from the {device}.",
        "Please let me set quiet hours when the {camera} doesn't send notifications.",
    ],
}


def expand(template: str, rng: random.Random) -> str:
    text = re.sub(r"\[([^\]]+)\]", lambda m: rng.choice(m.group(1).split("|")), template)
    values: dict[str, str] = {}

    def fill(m: re.Match[str]) -> str:
        slot = m.group(1)
        if slot not in values:
            if slot == "n2":
                values[slot] = str(rng.randint(1, int(values.get("n", "2")) - 1))
            else:
                choices = [v for v in SLOTS[slot] if v not in values.values()]
                values[slot] = rng.choice(choices)
        return values[slot]

    text = re.sub(r"\{(\w+)\}", fill, text)
    return re.sub(r"(^|[.?!] )([a-z])", lambda m: m.group(1) + m.group(2).upper(), text)  # "? my partner" -> "? My partner"


def ticket(body: str, rng: random.Random) -> str:
    """Wrap a ticket body in an optional greeting and sign-off, as people write them."""
    opener = rng.choice(OPENERS)
    first = body.split()[0]
    if opener and (len(first) == 1 or first[1:].islower()) and first not in KEEP_CAPITAL:
        body = body[0].lower() + body[1:]
    text = f"{opener}{body}{rng.choice(CLOSERS)}"
    if rng.random() < 0.08:  # some people type fast: all lower case, no final full stop
        text = text.lower().rstrip(".")
    return text


def draw(templates: list[str], n: int, seen: set[str], rng: random.Random, label: str) -> list[str]:
    """n tickets from these templates, drawn round-robin so no template dominates.

    Two tickets never share a body (greeting and sign-off do not count): the same
    request never appears twice with only "Hi," added.
    """
    texts: list[str] = []
    pool = list(templates)
    while len(texts) < n:
        if not pool:
            raise SystemExit(f"{label}: only {len(texts)} distinct texts; add templates or alternatives")
        rng.shuffle(pool)
        for template in list(pool):
            for _ in range(40):
                body = expand(template, rng)
                key = re.sub(r"\W+", " ", body.lower()).strip()
                if key not in seen:
                    seen.add(key)
                    texts.append(ticket(body, rng))
                    break
            else:
                pool.remove(template)  # exhausted: every wording it can make is used
            if len(texts) == n:
                break
    return texts


def make(per_class: int, val_fraction: float, rng: random.Random) -> tuple[list[dict], list[dict]]:
    """Train and validation rows. Validation tickets come from templates that train never
    uses, so validation accuracy measures reading new wordings, not recalling templates."""
    train, val = [], []
    for label, templates in TEMPLATES.items():
        order = list(templates)
        rng.shuffle(order)
        n_val_templates = round(len(order) * val_fraction)
        n_val = round(per_class * val_fraction)
        seen: set[str] = set()
        val += [{"text": t, "label": label} for t in draw(order[:n_val_templates], n_val, seen, rng, label)]
        train += [{"text": t, "label": label} for t in draw(order[n_val_templates:], per_class - n_val, seen, rng, label)]
    rng.shuffle(train)
    rng.shuffle(val)
    return train, val


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-class", type=int, default=160)
    ap.add_argument("--val-fraction", type=float, default=0.2)
    args = ap.parse_args()
    train, val = make(args.per_class, args.val_fraction, random.Random(SEED))
    all_texts = [r["text"].lower() for r in train + val]
    assert len(all_texts) == len(set(all_texts)), "duplicate texts"
    OUT.mkdir(parents=True, exist_ok=True)
    for name, rows in (("train.jsonl", train), ("validation.jsonl", val)):
        with open(OUT / name, "w", encoding="utf-8", newline="\n") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
    for label in TEMPLATES:
        n_tr = sum(r["label"] == label for r in train)
        n_va = sum(r["label"] == label for r in val)
        print(f"{label:16s} train {n_tr:4d}  validation {n_va:4d}")
    print(f"{'total':16s} train {len(train):4d}  validation {len(val):4d}  -> {OUT}")


if __name__ == "__main__":
    main()
