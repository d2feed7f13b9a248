// The operator's page: follows the running items over server-sent events. Without it the page reads as served
// (reload to see more). Served as /page.js: the page's Content-Security-Policy allows no inline script.
//
// Only while the tab is shown: a browser opens at most six connections to one host over HTTP/1.1, and a stream
// held open by each of a few tabs left in the background took them all, so a reload, another tab or an action
// (cancel, retry) of this very page waited for a free connection that never came.
//
// The stream is found beside this script, not at a path from the host's root: the page may be served under a
// path of another site's that a reverse proxy strips (nas.lan/almanac/).
if (window.EventSource) {
  const events = new URL('events', document.currentScript.src);
  let stream = null;
  const follow = () => {
    if (document.hidden) {
      if (stream) {
        stream.close();
        stream = null;
      }
    } else if (!stream || stream.readyState === EventSource.CLOSED) {
      stream = new EventSource(events);
      stream.addEventListener('running', (e) => {
        // The server renders the section (maud escapes every value); scripts in it would not run.
        document.getElementById('running').innerHTML = e.data;
      });
    }
  };
  document.addEventListener('visibilitychange', follow);
  follow();
}
