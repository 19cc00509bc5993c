// The whole build of the npm-basic template: copy src/ to dist/ and render every src/*.txt
// note into dist/<name>.html, its text escaped by the escape-html package that the install
// step fetched. Directories are made and files copied one by one: copying a directory's mode
// would copy the workspace's setgid bit, which the build door refuses.
"use strict";
const fs = require("node:fs");
const path = require("node:path");
const escapeHtml = require("escape-html");

const src = path.join(__dirname, "src");
const dist = path.join(__dirname, "dist");

function copyTree(from, to) {
  fs.mkdirSync(to, { recursive: true });
  for (const entry of fs.readdirSync(from, { withFileTypes: true })) {
    const source = path.join(from, entry.name);
    const target = path.join(to, entry.name);
    if (entry.isDirectory()) {
      copyTree(source, target);
    } else if (entry.isFile()) {
      fs.copyFileSync(source, target);
    }
  }
}

fs.rmSync(dist, { recursive: true, force: true });
copyTree(src, dist);
for (const name of fs.readdirSync(src)) {
  if (!name.endsWith(".txt")) continue;
  const text = fs.readFileSync(path.join(src, name), "utf8");
  const title = name.slice(0, -".txt".length);
  const page = `<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>${escapeHtml(title)}</title><link rel="stylesheet" href="style.css"></head>
<body><main><pre>${escapeHtml(text)}</pre></main></body>
</html>
`;
  fs.writeFileSync(path.join(dist, `${title}.html`), page);
  console.log(`rendered ${name} -> ${title}.html`);
}
