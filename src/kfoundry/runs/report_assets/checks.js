// Marks the page once loaded: whether every plot image decoded (read by the headless-browser test).
window.addEventListener("load", function () {
  var images = Array.prototype.slice.call(document.images);
  var broken = images.filter(function (img) { return !(img.complete && img.naturalWidth > 0); });
  document.body.setAttribute("data-images", broken.length ? "broken:" + broken.length : "ok:" + images.length);
});
