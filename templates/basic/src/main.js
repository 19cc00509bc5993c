// The published data's base URL, filled in when the site was created.
export const API_URL = "__PUBLICATION_API_URL__";

// Lists the published databases; a failure leaves the page as it is.
async function listDatabases() {
  const list = document.getElementById("databases");
  try {
    const response = await fetch(`${API_URL}/databases`);
    if (!response.ok) return;
    const body = await response.json();
    for (const db of body.data ?? []) {
      const item = document.createElement("li");
      item.textContent = db.name;
      list.append(item);
    }
  } catch {
    // Offline or the API is down: the static page still works.
  }
}

listDatabases();
