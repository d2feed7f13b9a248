use super::*;

fn local(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> NaiveDateTime {
    NaiveDate::from_ymd_opt(y, mo, d).unwrap().and_hms_opt(h, mi, s).unwrap()
}

#[test]
fn exif_and_xmp_date_forms() {
    let at = |s: &str| parse_date_text(s).map(|st| (st.local, st.offset_minutes));
    assert_eq!(at("2019:07:04 12:34:56"), Some((local(2019, 7, 4, 12, 34, 56), None)));
    assert_eq!(at("2019:07:04 12:34:56\0"), Some((local(2019, 7, 4, 12, 34, 56), None)), "trailing NUL");
    assert_eq!(at("2019-07-04T12:34:56+02:00"), Some((local(2019, 7, 4, 12, 34, 56), Some(120))));
    assert_eq!(at("2019-07-04T12:34:56Z"), Some((local(2019, 7, 4, 12, 34, 56), Some(0))));
    assert_eq!(at("2019-07-04T12:34-0530"), Some((local(2019, 7, 4, 12, 34, 0), Some(-330))));
    assert_eq!(at("2019-07-04"), Some((local(2019, 7, 4, 0, 0, 0), None)));
    let fraction = parse_date_text("2019-07-04T12:34:56.25").unwrap();
    assert_eq!(parse_date_text("2019:07:04 12:34:56.5").unwrap().local.and_utc().timestamp_subsec_millis(), 500);
    assert_eq!(fraction.local, local(2019, 7, 4, 12, 34, 56) + chrono::Duration::milliseconds(250));
    for blank in ["", "    :  :     :  :  ", "0000:00:00 00:00:00", "2019:02:30 10:00:00", "2019:13:01 00:00:00"] {
        assert_eq!(at(blank), None, "{blank:?}");
    }
    assert_eq!(at("2019:07:04 25:00:00"), None);
    assert_eq!(at("2019:07:04 12:34:56 +99:00"), None, "an offset beyond 14 hours");
    assert_eq!(at("2019"), None, "a year alone is no day");
}

#[test]
fn offsets() {
    assert_eq!(parse_offset("+02:00"), Some(120));
    assert_eq!(parse_offset("-05:30"), Some(-330));
    assert_eq!(parse_offset("+0100"), Some(60));
    assert_eq!(parse_offset("Z"), Some(0));
    assert_eq!(parse_offset("   :  "), None);
    assert_eq!(parse_offset("+2:00"), None);
    assert_eq!(parse_offset(" +02:00\0"), Some(120), "blanks and a NUL around it");
    assert_eq!(parse_offset("\0-05:30 "), Some(-330));
    // Within ±14 hours, minutes below 60.
    assert_eq!(parse_offset("+14:00"), Some(840));
    assert_eq!(parse_offset("-14:00"), Some(-840));
    assert_eq!(parse_offset("+15:00"), None);
    assert_eq!(parse_offset("+05:59"), Some(359));
    assert_eq!(parse_offset("+05:60"), None);
    assert_eq!(parse_offset("+05:99"), None);
}

#[test]
fn fractions_of_a_second() {
    assert_eq!(fraction_nanos("25"), Some(250_000_000));
    assert_eq!(fraction_nanos("000000001"), Some(1));
    assert_eq!(fraction_nanos("1234567891"), Some(123_456_789), "digits past the ninth dropped");
    assert_eq!(fraction_nanos(""), None, "no digits");
    assert_eq!(fraction_nanos("5x"), None);
    assert_eq!(parse_date_text("2019:07:04 12:34:56."), None, "a point and no fraction");
}

#[test]
fn file_name_patterns_of_phones_messengers_and_screenshots() {
    let at = |s: &str| date_in_file_name(s).map(|c| c.at.naive_utc());
    assert_eq!(at("IMG_20190704_123456.jpg"), Some(local(2019, 7, 4, 12, 34, 56)));
    assert_eq!(at("VID_20190704_123456.mp4"), Some(local(2019, 7, 4, 12, 34, 56)));
    assert_eq!(at("PXL_20190704_123456789.jpg"), Some(local(2019, 7, 4, 12, 34, 56)));
    assert_eq!(at("20190704_123456.jpg"), Some(local(2019, 7, 4, 12, 34, 56)));
    assert_eq!(at("IMG-20190704-WA0001.jpg"), Some(local(2019, 7, 4, 0, 0, 0)));
    assert_eq!(at("Screenshot_2019-07-04-12-34-56.png"), Some(local(2019, 7, 4, 12, 34, 56)));
    assert_eq!(at("Screenshot_20190704-123456.png"), Some(local(2019, 7, 4, 12, 34, 56)));
    assert_eq!(at("2019-07-04 12.34.56.jpg"), Some(local(2019, 7, 4, 12, 34, 56)));
    assert_eq!(at("WhatsApp Image 2019-07-04 at 12.34.56.jpeg"), Some(local(2019, 7, 4, 12, 34, 56)));
    assert_eq!(at("Screenshot 2019-07-04 at 1.02.03 PM.png"), Some(local(2019, 7, 4, 13, 2, 3)));
    assert_eq!(at("Screenshot 2019-07-04 at 12.02.03 AM.png"), Some(local(2019, 7, 4, 0, 2, 3)));
    assert_eq!(at("signal-2019-07-04-123456.jpg"), Some(local(2019, 7, 4, 12, 34, 56)));
    assert_eq!(at("20190704123456.jpg"), Some(local(2019, 7, 4, 12, 34, 56)));
    assert_eq!(at("holiday_2019_07_04.jpg"), Some(local(2019, 7, 4, 0, 0, 0)));
    assert_eq!(at("IMG_20190704_999999.jpg"), Some(local(2019, 7, 4, 0, 0, 0)), "a bad time keeps the date");
    assert_eq!(date_in_file_name("IMG_20190704_1.jpg").unwrap().source, CaptureSource::FileName);
}

#[test]
fn a_time_in_a_file_name_is_read_on_a_twelve_or_twenty_four_hour_clock() {
    let at = |s: &str| date_in_file_name(s).map(|c| c.at.naive_utc());
    for (name, hour) in [
        ("2019-07-04 09.02.03.jpg", 9),
        ("2019-07-04 at 9.02.03.png", 9),
        ("Screenshot 2019-07-04 at 9.02.03 AM.png", 9),
        ("Screenshot 2019-07-04 at 9.02.03 PM.png", 21),
        ("Screenshot 2019-07-04 at 11.02.03 PM.png", 23),
        ("Screenshot 2019-07-04 at 12.02.03 PM.png", 12),
        ("Screenshot 2019-07-04 at 12.02.03 AM.png", 0),
        // macOS writes a narrow no-break space before AM and PM.
        ("Screenshot 2019-07-04 at 9.02.03\u{202f}PM.png", 21),
        ("Screenshot 2019-07-04 at 12.02.03\u{202f}AM.png", 0),
        ("Screenshot 2019-07-04 at 21.02.03 PM.png", 21),
    ] {
        assert_eq!(at(name), Some(local(2019, 7, 4, hour, 2, 3)), "{name}");
    }
}

#[test]
fn a_file_name_may_be_dated_up_to_the_end_of_next_year() {
    use chrono::Datelike;
    let this_year = chrono::Utc::now().year();
    let at = |year: i32| date_in_file_name(&format!("IMG_{year}1231_235959.jpg")).map(|c| c.at.naive_utc());
    for year in [this_year - 1, this_year, this_year + 1] {
        assert_eq!(at(year), Some(local(year, 12, 31, 23, 59, 59)), "{year}");
    }
    assert_eq!(at(this_year + 2), None, "the year after next is a number, not a date");
}

#[test]
fn numbers_that_are_not_dates_give_nothing() {
    for name in [
        "IMG_1234.JPG",
        "DSC01234.jpg",
        "1562243696000.jpg",
        "1562243696.jpg",
        "IMG_20191304_123456.jpg",
        "IMG_20190230.jpg",
        "120190704.jpg",
        "201907041.jpg",
        "P1000234.JPG",
        "2019-7-4.jpg",
        "2019-07_04.jpg",
        "18000101_000000.jpg",
        "2090_10_10.png",
        "",
    ] {
        assert_eq!(date_in_file_name(name), None, "{name}");
    }
}
