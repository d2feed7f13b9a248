// The operator's page: follows the running items over server-sent events. Without it the page reads as served
// (reload to see more). Served as /page.js: the page's Content-Security-Policy allows no inline script.
if (window.EventSource) {
  const stream = new EventSource('/events');
  stream.addEventListener('running', (e) => {
    // The server renders the section (maud escapes every value); scripts in it would not run.
    document.getElementById('running').innerHTML = e.data;
  });
}
