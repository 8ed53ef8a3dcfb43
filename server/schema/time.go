package schema

import "time"

// The instants the API accepts (contract §8): a caller's timestamp whose UTC
// instant falls outside [MinInstant, MaxInstant] is refused, so that every
// stored time round-trips through the store's encodings (which hold years
// 1 to 9999 only) and nothing stored can later fail to load.
var (
	MinInstant = time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)
	MaxInstant = time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)
)

// rangeMessage is the value_error message of a timestamp outside
// [MinInstant, MaxInstant].
const rangeMessage = "la fecha debe estar, en UTC, entre 1970-01-01T00:00:00Z y 9999-12-31T23:59:59Z"

// ParseInstant is the API's one timestamp parser: an RFC 3339 date-time with
// its zone whose UTC instant lies in [MinInstant, MaxInstant], returned in
// UTC. ok is false for anything else.
func ParseInstant(s string) (t time.Time, ok bool) {
	t, reason, noZone := parseTimestamp(s)
	if reason != "" || noZone || !inRange(t) {
		return time.Time{}, false
	}
	return t, true
}

// inRange reports whether t lies in [MinInstant, MaxInstant].
func inRange(t time.Time) bool { return !t.Before(MinInstant) && !t.After(MaxInstant) }

// parseTimestamp reads an ISO-8601 / RFC 3339 date-time that carries its
// zone and returns it in UTC:
//
//	YYYY-MM-DD ( T | t | space ) HH:MM [ :SS [ .fraction ] ] ( Z | z | ±HH:MM | ±HHMM )
//
// with a fraction of 1 to 9 digits. A date alone, or a date-time without a
// zone, sets noZone (pydantic's timezone_aware); any other problem is
// described by reason (pydantic's datetime_parsing). Leap seconds (:60) are
// refused.
func parseTimestamp(s string) (t time.Time, reason string, noZone bool) {
	year, month, day, reason := parseDate(s)
	if reason != "" {
		return t, reason, false
	}
	if len(s) == 10 {
		return t, "", true
	}
	hour, minute, reason := parseHourMinute(s)
	if reason != "" {
		return t, reason, false
	}
	second, nanos, i, reason := parseSeconds(s, 16)
	if reason != "" {
		return t, reason, false
	}
	if i == len(s) {
		return t, "", true
	}
	offset, reason := parseOffset(s, i)
	if reason != "" {
		return t, reason, false
	}
	t = time.Date(year, time.Month(month), day, hour, minute, second, nanos, time.UTC)
	return t.Add(-time.Duration(offset) * time.Second), "", false
}

// parseDate reads the YYYY-MM-DD that starts s; reason is pydantic's
// wording of what is wrong, empty when the date is valid.
func parseDate(s string) (year, month, day int, reason string) {
	if len(s) < 10 {
		return 0, 0, 0, "input is too short"
	}
	year, ok := digits(s, 0, 4)
	if !ok {
		return 0, 0, 0, "invalid character in year"
	}
	if s[4] != '-' || s[7] != '-' {
		return 0, 0, 0, "invalid date separator, expected `-`"
	}
	month, ok = digits(s, 5, 2)
	if !ok {
		return 0, 0, 0, "invalid character in month"
	}
	day, ok = digits(s, 8, 2)
	if !ok {
		return 0, 0, 0, "invalid character in day"
	}
	if month < 1 || month > 12 {
		return 0, 0, 0, "month value is outside expected range of 1-12"
	}
	if day < 1 || day > daysIn(year, month) {
		return 0, 0, 0, "day value is outside expected range"
	}
	return year, month, day, ""
}

// parseHourMinute reads the separator and the hh:mm that follow a date
// (s[10:16]).
func parseHourMinute(s string) (hour, minute int, reason string) {
	if c := s[10]; c != 'T' && c != 't' && c != ' ' {
		return 0, 0, "invalid datetime separator, expected `T`, `t` or space"
	}
	if len(s) < 16 {
		return 0, 0, "input is too short"
	}
	hour, ok := digits(s, 11, 2)
	if !ok {
		return 0, 0, "invalid character in hour"
	}
	if s[13] != ':' {
		return 0, 0, "invalid time separator, expected `:`"
	}
	minute, ok = digits(s, 14, 2)
	if !ok {
		return 0, 0, "invalid character in minute"
	}
	if hour > 23 {
		return 0, 0, "hour value is outside expected range of 0-23"
	}
	if minute > 59 {
		return 0, 0, "minute value is outside expected range of 0-59"
	}
	return hour, minute, ""
}

// parseSeconds reads the optional :ss and its optional fraction (at most 9
// digits, after '.' or ',') from s[i:]; next is where the zone starts.
func parseSeconds(s string, i int) (second, nanos, next int, reason string) {
	if i >= len(s) || s[i] != ':' {
		return 0, 0, i, ""
	}
	second, ok := digits(s, i+1, 2)
	if !ok {
		return 0, 0, i, "invalid character in second"
	}
	if second > 59 {
		return 0, 0, i, "second value is outside expected range of 0-59"
	}
	i += 3
	if i >= len(s) || (s[i] != '.' && s[i] != ',') {
		return second, 0, i, ""
	}
	i++
	start := i
	for i < len(s) && isDigit(s[i]) {
		if i-start < 9 {
			nanos = nanos*10 + int(s[i]-'0')
		}
		i++
	}
	n := i - start
	if n == 0 {
		return 0, 0, i, "invalid character in second fraction"
	}
	if n > 9 {
		return 0, 0, i, "second fraction has more than 9 digits"
	}
	for ; n < 9; n++ {
		nanos *= 10
	}
	return second, nanos, i, ""
}

// parseOffset reads the zone that ends s, from s[i:]: Z, or ±hh[:]mm; offset
// is in seconds east of UTC.
func parseOffset(s string, i int) (offset int, reason string) {
	switch c := s[i]; c {
	case 'Z', 'z':
		i++
	case '+', '-':
		oh, ok := digits(s, i+1, 2)
		if !ok {
			return 0, "invalid timezone offset"
		}
		j := i + 3
		if j < len(s) && s[j] == ':' {
			j++
		}
		om, ok := digits(s, j, 2)
		if !ok {
			return 0, "invalid timezone offset"
		}
		if oh > 23 || om > 59 {
			return 0, "timezone offset must be less than 24 hours"
		}
		offset = (oh*60 + om) * 60
		if c == '-' {
			offset = -offset
		}
		i = j + 2
	default:
		return 0, "invalid timezone sign or extra characters"
	}
	if i != len(s) {
		return 0, "unexpected extra characters at the end of the input"
	}
	return offset, ""
}

// digits reads the n-digit decimal at s[i:].
func digits(s string, i, n int) (int, bool) {
	if i < 0 || i+n > len(s) {
		return 0, false
	}
	v := 0
	for _, c := range []byte(s[i : i+n]) {
		if !isDigit(c) {
			return 0, false
		}
		v = v*10 + int(c-'0')
	}
	return v, true
}

func daysIn(year, month int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}
