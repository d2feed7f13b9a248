-- A HEIF photo (HEIC, AVIF) stored sideways with an `irot` (every portrait photo of an iPhone) was turned twice:
-- libheif turns it upright as it decodes, and the crawl then turned the result again by the EXIF orientation the
-- iPhone also writes. Its preview and thumbnail lay on their side. The crawl now takes a HEIF's orientation from its
-- `irot` and `imir` only and never turns libheif's picture again; the proxies of every HEIF photo recorded as turned
-- are made again at the next crawl that lists its file (`proxies_missing`: read again, its proxies made, nothing
-- else changed but its width, height and orientation, read again: they were the upright picture's sides with a
-- quarter turn on top). A HEIF without `irot` whose EXIF said to turn it had upright proxies and is now shown as
-- libheif and Apple's Photos show it: its proxies are made again too. Soft-deleted ones too, for when they come back.
UPDATE media_assets AS a SET proxies_missing = true
  FROM asset_metadata AS m
 WHERE m.asset_id = a.id AND a.media_type = 'image' AND m.orientation_degrees <> 0
   AND lower(a.display_path) ~ '\.(heic|heif|hif|avif)$';
