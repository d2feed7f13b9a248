//! Burst detection: group a config's active stills into bursts with a primary frame.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use almanac_domain::{
    BurstDetectionArgs, BurstReport,
    ports::{BurstFrame, BurstGroup, MaintenanceStore},
};
use almanac_executor::{BoxFuture, HandlerContext, HandlerError, WorkHandler};

use crate::store_error;

/// Burst detection's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BurstSettings {
    /// Consecutive shots of one camera at most this far apart belong to one burst (default 1 s).
    pub gap: Duration,
    /// Fewest frames of a time-gap burst (default 3). A camera's own burst needs two.
    pub min_frames: usize,
}

impl Default for BurstSettings {
    fn default() -> Self {
        Self { gap: Duration::from_secs(1), min_frames: 3 }
    }
}

/// Groups frames into bursts.
///
/// - Frames carrying the camera's own burst identifier are grouped by (make, model, identifier): that wins.
/// - The others, of a known camera (make or model), are grouped by camera into runs whose consecutive capture
///   times are at most `gap` apart; runs of at least `min_frames` are bursts.
/// - The primary frame is the largest file (more detail survives compression in a sharp frame), then the
///   earliest, then the lowest asset id: deterministic, so a re-run picks the same one.
/// - A burst's id is its first frame's asset id, so a re-run gives the same ids.
pub fn group_bursts(frames: &[BurstFrame], settings: BurstSettings) -> Vec<BurstGroup> {
    /// (make, model)
    type Camera<'a> = (Option<&'a str>, Option<&'a str>);
    let mut by_camera_id: BTreeMap<(Camera<'_>, &str), Vec<&BurstFrame>> = BTreeMap::new();
    let mut by_camera: BTreeMap<Camera<'_>, Vec<&BurstFrame>> = BTreeMap::new();
    for f in frames {
        let camera = (f.camera_make.as_deref(), f.camera_model.as_deref());
        match f.camera_burst_id.as_deref() {
            Some(id) => by_camera_id.entry((camera, id)).or_default().push(f),
            None if camera != (None, None) => by_camera.entry(camera).or_default().push(f),
            None => {}
        }
    }
    let mut groups = Vec::new();
    for members in by_camera_id.into_values() {
        if members.len() >= 2 {
            groups.push(burst(members, true));
        }
    }
    let gap = chrono::Duration::from_std(settings.gap).unwrap_or(chrono::Duration::MAX);
    for mut shots in by_camera.into_values() {
        shots.sort_by_key(|f| (f.captured_at, f.asset_id));
        let mut run: Vec<&BurstFrame> = Vec::new();
        for shot in shots {
            if run.last().is_some_and(|prev| shot.captured_at - prev.captured_at > gap) {
                if run.len() >= settings.min_frames {
                    groups.push(burst(std::mem::take(&mut run), false));
                }
                run.clear();
            }
            run.push(shot);
        }
        if run.len() >= settings.min_frames {
            groups.push(burst(run, false));
        }
    }
    groups.sort_by_key(|g| (g.started_at, g.id));
    groups
}

fn burst(mut members: Vec<&BurstFrame>, from_camera: bool) -> BurstGroup {
    members.sort_by_key(|f| (f.captured_at, f.asset_id));
    let primary = members
        .iter()
        .max_by(|a, b| a.size.cmp(&b.size).then(b.captured_at.cmp(&a.captured_at)).then(b.asset_id.cmp(&a.asset_id)))
        .expect("a burst has frames");
    BurstGroup {
        id: members[0].asset_id,
        primary: primary.asset_id,
        members: members.iter().map(|f| f.asset_id).collect(),
        from_camera,
        camera_make: members[0].camera_make.clone(),
        camera_model: members[0].camera_model.clone(),
        started_at: members[0].captured_at,
        ended_at: members[members.len() - 1].captured_at,
    }
}

/// The burst detection handler (kind `burst_detection`).
pub struct BurstDetectionHandler<M> {
    store: Arc<M>,
    settings: BurstSettings,
}

impl<M> BurstDetectionHandler<M> {
    /// A burst detection handler over this store.
    pub fn new(store: Arc<M>, settings: BurstSettings) -> Self {
        Self { store, settings }
    }
}

impl<M: MaintenanceStore + 'static> WorkHandler for BurstDetectionHandler<M> {
    type Args = BurstDetectionArgs;

    fn work(&self, _: BurstDetectionArgs, ctx: HandlerContext) -> BoxFuture<'_, Result<BurstReport, HandlerError>> {
        Box::pin(async move {
            let config = ctx.config()?;
            let frames = self.store.burst_frames(config).await.map_err(store_error)?;
            if ctx.cancel.is_cancelled() {
                return Err(HandlerError::cancelled());
            }
            let groups = group_bursts(&frames, self.settings);
            self.store.replace_bursts(ctx.fence, config, &groups).await.map_err(store_error)?;
            let framed: usize = groups.iter().map(|g| g.members.len()).sum();
            tracing::info!(event = "bursts_detected", bursts = groups.len(), frames = framed, "bursts detected");
            Ok(BurstReport::new(frames.len() as u64, groups.len() as u64, framed as u64))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use almanac_domain::AssetId;
    use chrono::{TimeZone, Utc};

    fn frame(model: Option<&str>, millis: i64, size: u64, burst: Option<&str>) -> BurstFrame {
        BurstFrame {
            asset_id: AssetId::new(),
            camera_make: model.map(|_| "Make".to_owned()),
            camera_model: model.map(str::to_owned),
            captured_at: Utc.with_ymd_and_hms(2022, 1, 1, 12, 0, 0).unwrap() + chrono::Duration::milliseconds(millis),
            camera_burst_id: burst.map(str::to_owned),
            size,
        }
    }

    #[test]
    fn consecutive_shots_within_the_gap_form_a_burst_of_at_least_three() {
        let a = [frame(Some("X"), 0, 10, None), frame(Some("X"), 400, 30, None), frame(Some("X"), 1400, 20, None)];
        let lone = frame(Some("X"), 5000, 10, None);
        let pair = [frame(Some("X"), 9000, 10, None), frame(Some("X"), 9500, 10, None)];
        let mut all = vec![lone];
        all.extend(a.iter().cloned());
        all.extend(pair.iter().cloned());
        let groups = group_bursts(&all, BurstSettings::default());
        assert_eq!(groups.len(), 1, "the pair is too short, the lone shot alone");
        let g = &groups[0];
        assert_eq!(g.members, a.iter().map(|f| f.asset_id).collect::<Vec<_>>());
        assert_eq!((g.id, g.primary, g.from_camera), (a[0].asset_id, a[1].asset_id, false));
        assert_eq!((g.started_at, g.ended_at), (a[0].captured_at, a[2].captured_at));
    }

    #[test]
    fn a_gap_of_exactly_the_limit_still_joins_and_one_more_millisecond_splits() {
        let joined = [frame(Some("X"), 0, 1, None), frame(Some("X"), 1000, 1, None), frame(Some("X"), 2000, 1, None)];
        assert_eq!(group_bursts(&joined, BurstSettings::default()).len(), 1);
        let split = [frame(Some("X"), 0, 1, None), frame(Some("X"), 1001, 1, None), frame(Some("X"), 2002, 1, None)];
        assert!(group_bursts(&split, BurstSettings::default()).is_empty());
    }

    #[test]
    fn different_cameras_and_unknown_cameras_do_not_mix() {
        let frames = [
            frame(Some("X"), 0, 1, None),
            frame(Some("Y"), 100, 1, None),
            frame(Some("X"), 200, 1, None),
            frame(None, 300, 1, None),
            frame(None, 350, 1, None),
            frame(None, 400, 1, None),
        ];
        assert!(group_bursts(&frames, BurstSettings::default()).is_empty());
        let two = BurstSettings { min_frames: 2, ..BurstSettings::default() };
        let groups = group_bursts(&frames, two);
        assert_eq!(groups.len(), 1);
        assert_eq!(groups[0].members, [frames[0].asset_id, frames[2].asset_id]);
    }

    #[test]
    fn the_camera_burst_id_wins_over_time_gaps() {
        let frames = [
            frame(Some("X"), 0, 1, Some("B1")),
            frame(Some("X"), 60_000, 5, Some("B1")),
            frame(Some("X"), 100, 1, None),
        ];
        let groups = group_bursts(&frames, BurstSettings::default());
        assert_eq!(groups.len(), 1);
        assert!(groups[0].from_camera);
        assert_eq!(groups[0].members, [frames[0].asset_id, frames[1].asset_id]);
        assert_eq!(groups[0].primary, frames[1].asset_id);
        let single = [frame(Some("X"), 0, 1, Some("B2"))];
        assert!(group_bursts(&single, BurstSettings::default()).is_empty());
    }

    #[test]
    fn primary_ties_go_to_the_earliest_frame_and_rerunning_gives_the_same_groups() {
        let frames = [frame(Some("X"), 0, 7, None), frame(Some("X"), 100, 7, None), frame(Some("X"), 200, 7, None)];
        let first = group_bursts(&frames, BurstSettings::default());
        assert_eq!(first[0].primary, frames[0].asset_id);
        let mut shuffled = frames.to_vec();
        shuffled.reverse();
        assert_eq!(group_bursts(&shuffled, BurstSettings::default()), first);
    }
}
